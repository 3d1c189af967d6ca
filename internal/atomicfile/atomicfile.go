// Package atomicfile writes files so that readers, and the file system
// after a crash, see either the previous file or the complete new one,
// never a torn mix.
//
// A file is written to a temporary file ".NAME.tmp-XXXX" in the same
// folder, synced, given mode 0644, renamed over the target, and then the
// folder is synced so that the rename itself is durable. On any error the
// temporary file is removed and an existing file at the path is left as it
// was.
//
// The package imports nothing of memtrain; its errors start with
// "atomicfile: " and name the path.
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// bufferSize is the size of the buffer [Write] puts in front of the file.
const bufferSize = 1 << 20

// WriteFile creates or replaces the file at path with data, atomically.
func WriteFile(path string, data []byte) error {
	return replace(path, func(f *os.File) error {
		if _, err := f.Write(data); err != nil {
			return fmt.Errorf("atomicfile: writing %s: %w", path, err)
		}
		return nil
	})
}

// Write creates or replaces the file at path with what write writes,
// atomically. The writer write gets is a 1 MiB *bufio.Writer, flushed
// after write returns; callers need no buffer of their own
// (bufio.NewWriterSize on it with up to 1 MiB returns it unchanged).
// Errors from write are returned as they are, and the old file is kept;
// write should give them context.
func Write(path string, write func(w io.Writer) error) error {
	return replace(path, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, bufferSize)
		if err := write(bw); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("atomicfile: writing %s: %w", path, err)
		}
		return nil
	})
}

// replace writes path through a temporary file that fill fills.
func replace(path string, fill func(f *os.File) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil && runtime.GOOS != "windows" {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir flushes a folder's entries, making a rename, creation or removal
// in it durable. Windows cannot sync folders; there it does nothing.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("atomicfile: syncing %s: %w", dir, err)
	}
	return nil
}

// TempDir makes a new folder in parent, named pattern as os.MkdirTemp
// names it, that a finished output is renamed from: mode 0755 like every
// other output folder (os.MkdirTemp's is 0700, which would make a dataset
// or a checkpoint unreadable to the other users of a shared machine).
func TempDir(parent, pattern string) (string, error) {
	tmp, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return tmp, nil
}
