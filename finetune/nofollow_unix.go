//go:build unix

package finetune

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// openNoFollow opens path as os.OpenFile does, except that a symbolic link
// at path is refused rather than followed: a run writes its own files and
// never through a link into someone else's (a .lock linked to a user's
// file would truncate it).
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: memtrain does not write through links (remove it)", path)
	}
	return f, err
}
