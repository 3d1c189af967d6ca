//go:build unix

package inputfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within fails the test if fn does not return within a few seconds: what
// is tested here is that nothing blocks on a named pipe.
func within(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("blocked on a named pipe")
	}
}

func TestRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.safetensors")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "config.json")
	os.WriteFile(file, []byte("{}"), 0o644)
	fileLink := filepath.Join(dir, "file-link.json")
	os.Symlink(file, fileLink)
	for _, tc := range []struct {
		path, want string // want "" for a regular file
	}{
		{fifo, fifo + ": not a regular file (a named pipe)"},
		{link, link + ": not a regular file (a named pipe)"},
		{dir, dir + ": not a regular file (a folder)"},
		{"/dev/null", "/dev/null: not a regular file (a character device)"},
		{file, ""},
		{fileLink, ""},
	} {
		within(t, func() {
			for name, open := range map[string]func(string) error{
				"Open":     func(p string) error { f, err := Open(p); f.Close(); return err },
				"ReadFile": func(p string) error { _, err := ReadFile(p); return err },
				"Stat":     func(p string) error { _, err := Stat(p); return err },
			} {
				err := open(tc.path)
				if tc.want == "" {
					if err != nil {
						t.Errorf("%s(%s): %v", name, tc.path, err)
					}
					continue
				}
				if err == nil || err.Error() != tc.want || !errors.Is(err, ErrNotRegular) {
					t.Errorf("%s(%s): %v, want %q", name, tc.path, err, tc.want)
				}
			}
		})
	}
}

// TestMissing: a file that does not exist is reported as os.Open and
// os.ReadFile report it.
func TestMissing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nope.json")
	if _, err := ReadFile(p); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "open "+p) {
		t.Errorf("ReadFile: %v", err)
	}
	if _, err := Open(p); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "open "+p) {
		t.Errorf("Open: %v", err)
	}
}
