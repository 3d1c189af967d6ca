//go:build !unix

package finetune

import (
	"fmt"
	"os"
)

// openNoFollow is os.OpenFile refusing a symbolic link at path, checked
// before the open where the system has no O_NOFOLLOW.
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is a symbolic link: memtrain does not write through links (remove it)", path)
	}
	return os.OpenFile(path, flag, perm)
}
