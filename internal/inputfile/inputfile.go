// Package inputfile opens the files memtrain reads as input — checkpoint
// shards and configurations, tokenizers, data files, dataset stores, specs
// and configuration files — after checking that each is a regular file.
// Opening a named pipe blocks until something writes to it, and a device
// or a socket may never end, so a command given one would hang; such a
// path is refused by name before it is opened. Symbolic links are
// followed: a link to a regular file is one.
//
// The package imports nothing of memtrain.
package inputfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrNotRegular is the error (under errors.Is) of a path that is not a
// regular file.
var ErrNotRegular = errors.New("not a regular file")

// Check returns an error naming path and what it is when mode is not a
// regular file's, nil when it is.
func Check(path string, mode fs.FileMode) error {
	if mode.IsRegular() {
		return nil
	}
	return fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, Kind(mode))
}

// Kind says what a file of mode is, as a noun: "a named pipe".
func Kind(mode fs.FileMode) string {
	if mode.IsRegular() {
		return "a regular file"
	}
	switch {
	case mode.IsDir():
		return "a folder"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a device"
	}
	return "an irregular file"
}

// Stat is os.Stat (links followed), then Check: the file's information
// for a regular file, an error otherwise.
func Stat(path string) (fs.FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := Check(path, fi.Mode()); err != nil {
		return nil, err
	}
	return fi, nil
}

// refuse returns the error of a path that exists and is not a regular
// file, and nil for a regular file or one that cannot be stat'ed (whose
// open then reports why, as os.Open words it).
func refuse(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	return Check(path, fi.Mode())
}

// Open is os.Open for a regular file; any other file is refused before it
// is opened.
func Open(path string) (*os.File, error) {
	if err := refuse(path); err != nil {
		return nil, err
	}
	return os.Open(path)
}

// ReadFile is os.ReadFile for a regular file; any other file is refused
// before it is opened.
func ReadFile(path string) ([]byte, error) {
	if err := refuse(path); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}
