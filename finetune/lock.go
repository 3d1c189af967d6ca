package finetune

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/memtrain/memtrain/internal/flock"
)

// LockFile is the run folder's lock: an advisory flock held for as long
// as a process trains in the folder, with the holder's PID and host
// written in it as a note for the next process (the lock itself, not the
// note, decides).
const LockFile = ".lock"

// A LockedError says that another process holds a run folder.
type LockedError struct {
	Dir  string
	Note string // "pid 1234 on host h", or "" when the holder wrote none
}

func (e *LockedError) Error() string {
	who := "another process"
	if e.Note != "" {
		who = e.Note
	}
	return fmt.Sprintf("%s is in use by %s (lock %s): wait for it to finish, or stop it", e.Dir, who, filepath.Join(e.Dir, LockFile))
}

// Lock takes the lock of run folder dir (created if need be) and returns
// its release. A second Lock of the same folder, from any process, fails
// with a *LockedError naming the holder.
func Lock(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := openNoFollow(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file (remove it)", path)
		}
		return nil, fmt.Errorf("finetune: %w", err)
	}
	ok, err := flock.TryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("finetune: locking %s: %w", path, err)
	}
	if !ok { // another process holds it
		b := make([]byte, 256)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		return nil, &LockedError{Dir: dir, Note: strings.TrimSpace(string(b[:n]))}
	}
	host, _ := os.Hostname()
	note := "pid " + strconv.Itoa(os.Getpid())
	if host != "" {
		note += " on host " + host
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(note+"\n"), 0)
	}
	return func() {
		f.Truncate(0)
		f.Close() // closing releases the flock
	}, nil
}
