//go:build unix

package hub

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive flock on f without waiting, as Python's
// filelock does for huggingface_hub: the two exclude each other.
func tryLock(f *os.File) (ok bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
