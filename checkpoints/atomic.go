package checkpoints

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// WriteFileAtomic writes data to the file at path atomically: readers, and
// the file system after a crash, see either the previous file or the
// complete new one, never a torn mix. See [writeAtomic] for how.
func WriteFileAtomic(path string, data []byte) error {
	return writeAtomic(path, func(w io.Writer) error {
		if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("checkpoints: %w", err)
		}
		return nil
	})
}

// writeAtomic creates or replaces the file at path with what write writes.
// It writes to a temporary file ".NAME.tmp-XXXX" in the same folder, syncs
// it, renames it over path and syncs the folder. On any error, including
// one returned by write, the temporary file is removed and an existing file
// at path is left as it was. Errors from write are returned as they are;
// write should give them context. The new file has mode 0644.
func writeAtomic(path string, write func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil && runtime.GOOS != "windows" {
		return fmt.Errorf("checkpoints: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	return syncDir(dir)
}

// syncDir flushes a folder's entries, making a rename in it durable.
// Windows cannot sync folders; there it does nothing.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("checkpoints: syncing %s: %w", dir, err)
	}
	return nil
}
