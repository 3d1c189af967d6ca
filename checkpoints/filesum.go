package checkpoints

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
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
