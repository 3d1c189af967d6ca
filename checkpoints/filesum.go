package checkpoints

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memtrain/memtrain/internal/inputfile"
)

// A FileSum is a file's size and SHA-256 (lower-case hex), taken from the
// bytes as they went to the file: a manifest of them lets a reader check
// later that the file is still what was written, and taking them while
// writing costs no second read of a file that may be tens of gigabytes.
type FileSum struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SumBytes is the FileSum of a file holding exactly b.
func SumBytes(b []byte) FileSum {
	h := sha256.Sum256(b)
	return FileSum{Size: int64(len(b)), SHA256: hex.EncodeToString(h[:])}
}

// summer counts and hashes what is written through it.
type summer struct {
	h hash.Hash
	n int64
}

func newSummer() *summer { return &summer{h: sha256.New()} }

func (s *summer) Write(p []byte) (int, error) {
	s.h.Write(p) // a hash.Hash never fails
	s.n += int64(len(p))
	return len(p), nil
}

// tee is w with s hashing the same bytes, or w itself when s is nil.
func (s *summer) tee(w io.Writer) io.Writer {
	if s == nil {
		return w
	}
	return io.MultiWriter(w, s)
}

func (s *summer) sum() FileSum {
	return FileSum{Size: s.n, SHA256: hex.EncodeToString(s.h.Sum(nil))}
}

// SumFile is the FileSum of the file at path, read through once.
func SumFile(path string) (FileSum, error) {
	f, err := inputfile.Open(path)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	s := newSummer()
	if _, err := io.Copy(s, f); err != nil {
		return FileSum{}, fmt.Errorf("%s: %w", path, err)
	}
	return s.sum(), nil
}

// SumFolder is the FileSum of every regular file directly in dir (a
// checkpoint folder), by name: a record to check the folder against
// later (CheckSums). Hidden files (a lock) are left out.
func SumFolder(dir string) (map[string]FileSum, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	sums := map[string]FileSum{}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		s, err := SumFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("checkpoints: %w", err)
		}
		sums[e.Name()] = s
	}
	return sums, nil
}

// CheckSums checks the files of dir against sums that SumFolder took:
// each must be there with its size and SHA-256. It reads every file once
// (about a second a GB). The error names the first bad file, in name
// order.
func CheckSums(dir string, sums map[string]FileSum) error {
	for _, name := range slices.Sorted(maps.Keys(sums)) {
		want := sums[name]
		got, err := SumFile(filepath.Join(dir, name))
		switch {
		case err != nil:
			return fmt.Errorf("checkpoints: %s: %s: %w", dir, name, err)
		case got.Size != want.Size:
			return fmt.Errorf("checkpoints: %s: %s: %d bytes, %d recorded (truncated or overwritten)", dir, name, got.Size, want.Size)
		case got.SHA256 != want.SHA256:
			return fmt.Errorf("checkpoints: %s: %s: SHA-256 differs from the one recorded (corrupt)", dir, name)
		}
	}
	return nil
}
