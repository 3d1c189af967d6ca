//go:build unix

// Package flock takes advisory file locks: the flock(2) that Python's
// filelock takes too, released by the kernel when its holder exits,
// however it dies.
package flock

import (
	"errors"
	"os"
	"syscall"
)

// TryLock takes an exclusive lock on f without waiting; ok is false when
// another holder has it.
func TryLock(f *os.File) (ok bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
