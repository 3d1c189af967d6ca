package atomicfile

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// assertUntouched checks that dir holds exactly the file old.txt, with the
// contents old.
func assertUntouched(t *testing.T, dir string, old []byte) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"old.txt"}) {
		t.Errorf("folder holds %q, want only old.txt", names)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "old.txt")); err != nil || !bytes.Equal(b, old) {
		t.Errorf("old.txt changed: %q, %v", b, err)
	}
}

func TestWriteFailures(t *testing.T) {
	errBoom := errors.New("boom")
	dir := t.TempDir()
	path := filepath.Join(dir, "old.txt")
	old := []byte("earlier contents")
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}

	// The writer fails half way through, past the buffer.
	err := Write(path, func(w io.Writer) error {
		w.Write(bytes.Repeat([]byte("new"), 1<<20))
		return errBoom
	})
	if err != errBoom {
		t.Errorf("Write: %v, want %v as it is", err, errBoom)
	}
	assertUntouched(t, dir, old)

	// The rename fails: the target is a non-empty folder.
	target := filepath.Join(t.TempDir(), "folder")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = WriteFile(target, []byte("data"))
	if err == nil {
		t.Errorf("WriteFile over a folder: no error")
	} else if !strings.HasPrefix(err.Error(), "atomicfile: writing "+target+": ") {
		t.Errorf("WriteFile over a folder: %q does not start with the package and the path", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(target))
	if len(entries) != 1 {
		t.Errorf("temporary file left behind: %v", entries)
	}

	// The folder does not exist.
	missing := filepath.Join(dir, "missing", "f")
	if err := WriteFile(missing, nil); err == nil {
		t.Errorf("WriteFile into a missing folder: no error")
	} else if !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WriteFile into a missing folder: %v, want the path and ErrNotExist", err)
	}
	assertUntouched(t, dir, old)
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	for _, content := range []string{"first", "second, longer", ""} {
		if err := WriteFile(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Errorf("read back %q, %v; want %q", b, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("folder holds %v, want only config.json", entries)
	}
	// A relative path in the current folder.
	t.Chdir(dir)
	if err := WriteFile("rel.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "rel.txt")); string(b) != "x" {
		t.Errorf("rel.txt = %q", b)
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.bin")
	want := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: several buffers
	err := Write(path, func(w io.Writer) error {
		if bw, ok := w.(*bufio.Writer); !ok || bufio.NewWriterSize(w, 1<<20) != bw {
			t.Errorf("Write gives %T, want a 1 MiB *bufio.Writer", w)
		}
		for b := want; len(b) > 0; b = b[min(len(b), 1000):] {
			if _, err := w.Write(b[:min(len(b), 1000)]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, want) {
		t.Errorf("read back %d bytes, %v; want %d", len(b), err, len(want))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("folder holds %v, want only big.bin", entries)
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Error(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	err := SyncDir(missing)
	if runtime.GOOS == "windows" {
		return
	}
	if err == nil || !strings.HasPrefix(err.Error(), "atomicfile: syncing "+missing) {
		t.Errorf("SyncDir(missing) = %v, want an error naming it", err)
	}
}

// TempDir's folder is readable by others, as the outputs renamed from it
// must be, and named by the pattern.
func TestTempDir(t *testing.T) {
	parent := t.TempDir()
	tmp, err := TempDir(parent, ".tmp-ds-*")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsDir() || st.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %v, want a 0755 folder", tmp, st.Mode())
	}
	if filepath.Dir(tmp) != parent || !strings.HasPrefix(filepath.Base(tmp), ".tmp-ds-") {
		t.Errorf("%s: not in %s under the pattern", tmp, parent)
	}
	if _, err := TempDir(filepath.Join(parent, "missing"), "x-*"); err == nil {
		t.Error("TempDir in a missing folder succeeded")
	}
}
