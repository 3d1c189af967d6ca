//go:build unix

package finetune

import (
	"errors"
	"os"
	"syscall"
)

// flock takes an exclusive advisory lock on f without waiting; the
// kernel releases it when its holder exits, however it dies.
func flock(f *os.File) (held bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}
