package checkpoints

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/memtrain/memtrain/internal/atomicfile"
)

// A StreamTensor is a tensor of a file that WriteStream writes: its name
// and shape, known before its values, which come later.
type StreamTensor struct {
	Name  string
	Shape []int // [] or nil for a scalar
}

func (t *StreamTensor) elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// A Fill supplies the values of tensor i (an index into the tensors given
// to WriteStream or WriteSetStream) by calling put with them, in order, in
// one or more parts, which put converts and writes at once: a caller
// holding a tensor on a device can hand it over a bounded buffer at a
// time. put's error is the write's; Fill returns it.
type Fill func(i int, put func(values []float32) error) error

// WriteStream writes a safetensors file of the given tensors at path,
// atomically and laid out as WriteFile lays it out (so, for the same
// values, byte for byte WriteFile's file), without holding the values:
// the header goes first, then fill is called once per tensor in the
// file's order (sorted by name) and its values are converted as they
// come. It returns the size and SHA-256 of the bytes written, hashed on
// the way to the file. Fill must give each tensor exactly its shape's
// number of values.
func WriteStream(path string, tensors []StreamTensor, dtype DType, metadata map[string]string, fill Fill) (FileSum, error) {
	if err := checkHeader(path, tensors, dtype, metadata); err != nil {
		return FileSum{}, err
	}
	return writeStream(path, tensors, dtype, metadata, true, fill)
}

// Header is what WriteStream writes before the tensors' data: the 8-byte
// header length and the JSON header. A file of these bytes followed by
// Layout's data extent as a hole is a sparse file of the same layout
// (tests and planning make checkpoints of full-size models that way).
func Header(tensors []StreamTensor, dtype DType, metadata map[string]string) []byte {
	header := appendHeader(nil, sortedSpecs(tensors), dtype, metadata)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(out, header...)
}

// Layout is where WriteStream puts each tensor of its file: the
// TensorInfo of each, in the order of tensors (Offset from the start of
// the file). It depends only on the names, shapes, dtype and metadata, so
// that any process can compute another's file layout.
func Layout(tensors []StreamTensor, dtype DType, metadata map[string]string) []TensorInfo {
	sorted := sortedSpecs(tensors)
	header := appendHeader(nil, sorted, dtype, metadata)
	start := int64(8 + len(header))
	at := make(map[string]TensorInfo, len(tensors))
	off := start
	for _, t := range sorted {
		n := t.elements() * int64(dtype.Size())
		at[t.Name] = TensorInfo{Name: t.Name, DType: dtype, Shape: slices.Clone(t.Shape), Offset: off, Size: n}
		off += n
	}
	out := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		out[i] = at[t.Name]
	}
	return out
}

func sortedSpecs(tensors []StreamTensor) []*StreamTensor {
	sorted := make([]*StreamTensor, len(tensors))
	for i := range tensors {
		sorted[i] = &tensors[i]
	}
	slices.SortFunc(sorted, func(a, b *StreamTensor) int { return strings.Compare(a.Name, b.Name) })
	return sorted
}

// writeStream is WriteStream after the checks; hash says whether to take
// the FileSum.
func writeStream(path string, tensors []StreamTensor, dtype DType, metadata map[string]string, hash bool, fill Fill) (FileSum, error) {
	sorted := sortedSpecs(tensors)
	index := make(map[*StreamTensor]int, len(tensors))
	for i := range tensors {
		index[&tensors[i]] = i
	}
	header := appendHeader(nil, sorted, dtype, metadata)
	var s *summer
	if hash {
		s = newSummer()
	}
	err := atomicfile.Write(path, func(w io.Writer) error {
		// atomicfile buffers 1 MiB in front of the file; values are
		// converted a small chunk at a time on their way to it (and to
		// the hash).
		out := s.tee(w)
		buf := make([]byte, encodeChunk)
		var length [8]byte
		binary.LittleEndian.PutUint64(length[:], uint64(len(header)))
		if _, err := out.Write(length[:]); err != nil {
			return fmt.Errorf("checkpoints: %s: %w", path, err)
		}
		if _, err := out.Write(header); err != nil {
			return fmt.Errorf("checkpoints: %s: %w", path, err)
		}
		for _, t := range sorted {
			want, got := t.elements(), int64(0)
			err := fill(index[t], func(values []float32) error {
				if got += int64(len(values)); got > want {
					return fmt.Errorf("more than the %d values of shape %v", want, t.Shape)
				}
				return writeData(out, buf, values, dtype)
			})
			if err == nil && got != want {
				err = fmt.Errorf("%d values for shape %v, want %d", got, t.Shape, want)
			}
			if err != nil {
				return fmt.Errorf("checkpoints: %s: tensor %q: %w", path, t.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return FileSum{}, err
	}
	if s == nil {
		return FileSum{}, nil
	}
	return s.sum(), nil
}
