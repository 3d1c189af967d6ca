//go:build unix

package flock

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTryLock: a second holder of the same file is refused until the
// first closes it (flock locks belong to open files, not processes).
func TestTryLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := open(), open()
	defer b.Close()
	if ok, err := TryLock(a); !ok || err != nil {
		t.Fatalf("first: %v, %v", ok, err)
	}
	if ok, err := TryLock(b); ok || err != nil {
		t.Fatalf("second while the first holds it: %v, %v; want refused", ok, err)
	}
	a.Close()
	if ok, err := TryLock(b); !ok || err != nil {
		t.Fatalf("second after the first closed: %v, %v", ok, err)
	}
}
