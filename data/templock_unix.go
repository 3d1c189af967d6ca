//go:build unix

package data

import (
	"errors"
	"os"
	"syscall"
)

// errNoLocks says that advisory locks cannot be taken here.
var errNoLocks = errors.New("data: no advisory locks on this system")

// tryLock takes an exclusive advisory lock (flock) on f without waiting:
// held is true when another process holds it. The kernel releases it when
// f is closed or its process ends, however it dies.
func tryLock(f *os.File) (held bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}
