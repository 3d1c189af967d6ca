package checkpoints

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memtrain/memtrain/internal/inputfile"
)

// Fingerprint blocks: each weight file contributes its size, its first
// fingerprintHead bytes (the safetensors header and the first tensors) and
// fingerprintBlocks blocks of fingerprintBlock bytes spread evenly over
// the rest, its last block included.
const (
	fingerprintHead   = 1 << 20
	fingerprintBlocks = 32
	fingerprintBlock  = 64 << 10
)

// Fingerprint identifies the contents of the checkpoint folder dir without
// reading all of it: SHA-256 over its config.json, the name and size of
// every .safetensors file (and the index), each file's first MiB and 32
// blocks of 64 KiB spread over the rest. It reads at most about 3 MiB a
// file, so that a resume of a 405B run checks its base in well under a
// second; two checkpoints that differ anywhere in their configuration,
// their files' sizes or headers, or in weights re-initialised or
// retrained, differ in it. A change confined to bytes between the sampled
// blocks is not seen: VerifyCheckpoint (a training checkpoint's manifest)
// is the check of every byte. The result is "sample-sha256:" and hex.
func Fingerprint(dir string) (string, error) {
	h := sha256.New()
	cfg, err := inputfile.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return "", fmt.Errorf("checkpoints: %w", err)
	}
	writeField(h, ConfigFile, cfg)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("checkpoints: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".safetensors") || n == SafetensorsIndexFile {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "", fmt.Errorf("checkpoints: %s: no .safetensors file", dir)
	}
	for _, n := range names {
		if err := fingerprintFile(h, filepath.Join(dir, n)); err != nil {
			return "", err
		}
	}
	return "sample-sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// fingerprintFile adds path's name, size and sampled blocks to h.
func fingerprintFile(h io.Writer, path string) error {
	f, err := inputfile.Open(path)
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	size := fi.Size()
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(size))
	writeField(h, filepath.Base(path), hdr[:])
	buf := make([]byte, fingerprintHead)
	read := func(off int64, n int) error {
		n = int(min(int64(n), size-off))
		if n <= 0 {
			return nil
		}
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return fmt.Errorf("checkpoints: %s: %w", path, err)
		}
		h.Write(buf[:n])
		return nil
	}
	if err := read(0, fingerprintHead); err != nil {
		return err
	}
	if rest := size - fingerprintHead; rest > 0 {
		for i := range fingerprintBlocks {
			// Block i starts i/(blocks−1) of the way through the rest, the
			// last one ending with the file.
			off := fingerprintHead + (rest-fingerprintBlock)*int64(i)/(fingerprintBlocks-1)
			if err := read(max(off, fingerprintHead), fingerprintBlock); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeField writes a name and a length-prefixed value, so that fields
// cannot run into each other.
func writeField(h io.Writer, name string, value []byte) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(name)))
	h.Write(n[:])
	io.WriteString(h, name)
	binary.LittleEndian.PutUint64(n[:], uint64(len(value)))
	h.Write(n[:])
	h.Write(value)
}
