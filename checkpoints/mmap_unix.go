//go:build unix

package checkpoints

import (
	"math"
	"os"
	"syscall"
)

// mmapFile maps the first size bytes of f read-only and returns the mapping
// and a function that unmaps it.
func mmapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 || size > math.MaxInt {
		return nil, nil, syscall.EINVAL
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}

// releasePages drops the process's mapping of the pages under b, part of
// a mapping, once they are read: they stay in the page cache, but leave
// this process's resident set, so that loading a model counts only the
// model (the pages fault back in if read again).
func releasePages(mapping []byte, off, n int64) {
	page := int64(os.Getpagesize())
	lo := off / page * page
	hi := min(int64(len(mapping)), (off+n)/page*page) // the page under off+n may be read next
	if hi > lo {
		_ = syscall.Madvise(mapping[lo:hi], syscall.MADV_DONTNEED) // advice only: a failure changes nothing
	}
}
