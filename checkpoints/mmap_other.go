//go:build !unix

package checkpoints

import (
	"errors"
	"os"
)

// mmapFile reports that memory mapping is not available on this system, so
// files are read with ReadAt instead.
func mmapFile(f *os.File, size int64) ([]byte, func() error, error) {
	return nil, nil, errors.ErrUnsupported
}

// releasePages does nothing where files are not mapped.
func releasePages(mapping []byte, off, n int64) {}
