//go:build !unix

package data

import (
	"errors"
	"os"
)

// mapFile reports that memory mapping is not available on this system, so
// the file is read instead.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	return nil, nil, errors.ErrUnsupported
}
