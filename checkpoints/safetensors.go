package checkpoints

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/memtrain/memtrain/internal/inputfile"
)

// maxHeaderSize bounds the JSON header of a safetensors file; the
// safetensors library refuses larger headers too.
const maxHeaderSize = 100_000_000

// metadataKey is the header entry holding the file's string metadata.
const metadataKey = "__metadata__"

// ErrTensorNotFound is wrapped by the errors of reads that name a tensor a
// [File] or [Set] does not hold.
var ErrTensorNotFound = errors.New("tensor not found")

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int // [] for a scalar

	// Offset is the position of the tensor's first byte in its file:
	// 8 + the header length + data_offsets[0]. Size is its length in bytes.
	Offset, Size int64
}

// Elements returns the number of elements of the tensor, the product of its
// shape.
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

func (t TensorInfo) clone() TensorInfo {
	t.Shape = slices.Clone(t.Shape)
	if t.Shape == nil {
		t.Shape = []int{}
	}
	return t
}

// A File is an open safetensors file. On Unix systems the file is memory
// mapped and reads convert straight from the mapping; elsewhere it is read
// with ReadAt.
//
// The methods of a File may be called concurrently, except Close, which
// must not overlap any other call. Truncating the file while it is open
// may crash the program, as with any memory-mapped file.
type File struct {
	path    string
	size    int64
	data    []byte      // the whole file when mapped (or in memory), else nil
	mapped  bool        // data is a mapping of the file, whose read pages releasePages drops
	r       io.ReaderAt // reads the file when data is nil
	release func() error
	closed  bool

	tensors   []TensorInfo // sorted by name
	byName    map[string]int
	metadata  map[string]string
	bytesRead atomic.Int64
	released  atomic.Int64 // the mapping's pages below this offset were dropped (releaseRead)
}

// OpenFile opens the safetensors file at path and validates its header: the
// header must be a JSON object of tensors whose dtype is F32, BF16 or F16,
// whose shapes agree with their data_offsets, and whose data lies within
// the file without overlapping; an optional "__metadata__" entry must map
// strings to strings. Tensors with a zero dimension and scalars (shape [])
// are valid.
func OpenFile(path string) (*File, error) {
	return openFile(path, true)
}

// openFile is OpenFile; useMmap false forces the ReadAt code path.
func openFile(path string, useMmap bool) (*File, error) {
	osf, err := inputfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	fi, err := osf.Stat()
	if err != nil {
		osf.Close()
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	if !fi.Mode().IsRegular() {
		osf.Close()
		return nil, fmt.Errorf("checkpoints: %s: not a regular file", path)
	}
	f := &File{path: path, size: fi.Size()}
	if useMmap && f.size >= 8 {
		if data, unmap, err := mmapFile(osf, f.size); err == nil {
			// The mapping outlives the descriptor.
			osf.Close()
			f.data, f.release, f.mapped = data, unmap, true
		}
	}
	if f.data == nil {
		f.r, f.release = osf, osf.Close
	}
	if err := f.readHeader(); err != nil {
		f.release()
		return nil, err
	}
	return f, nil
}

// newFileFromBytes returns a File reading from data as if it were the file
// at path.
func newFileFromBytes(path string, data []byte) (*File, error) {
	if data == nil {
		data = []byte{}
	}
	f := &File{path: path, size: int64(len(data)), data: data}
	if err := f.readHeader(); err != nil {
		return nil, err
	}
	return f, nil
}

// newFileFromReaderAt returns a File reading size bytes from r as if they
// were the file at path.
func newFileFromReaderAt(path string, r io.ReaderAt, size int64) (*File, error) {
	f := &File{path: path, size: size, r: r}
	if err := f.readHeader(); err != nil {
		return nil, err
	}
	return f, nil
}

// readAt reads len(p) bytes at off.
func (f *File) readAt(p []byte, off int64) error {
	if f.data != nil {
		copy(p, f.data[off:])
		return nil
	}
	n, err := f.r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// readHeader reads and validates the header.
func (f *File) readHeader() error {
	if f.size < 8 {
		return fmt.Errorf("checkpoints: %s: file is %d bytes, too short for the 8-byte header length", f.path, f.size)
	}
	var lenBuf [8]byte
	if err := f.readAt(lenBuf[:], 0); err != nil {
		return fmt.Errorf("checkpoints: %s: reading the header length: %w", f.path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > uint64(f.size-8) {
		return fmt.Errorf("checkpoints: %s: header length %d exceeds the %d bytes after the length field", f.path, n, f.size-8)
	}
	if n > maxHeaderSize {
		return fmt.Errorf("checkpoints: %s: header length %d exceeds the limit of %d bytes", f.path, n, maxHeaderSize)
	}
	header := make([]byte, n)
	if err := f.readAt(header, 8); err != nil {
		return fmt.Errorf("checkpoints: %s: reading the header: %w", f.path, err)
	}
	dataStart := 8 + int64(n)
	tensors, metadata, err := parseHeader(header, f.size-dataStart)
	if err != nil {
		return fmt.Errorf("checkpoints: %s: %w", f.path, err)
	}
	f.byName = make(map[string]int, len(tensors))
	for i := range tensors {
		tensors[i].Offset += dataStart
		f.byName[tensors[i].Name] = i
	}
	f.tensors, f.metadata = tensors, metadata
	return nil
}

// parseHeader parses and validates a safetensors JSON header for a data
// section of dataLen bytes. The offsets of the returned tensors, which are
// sorted by name, are relative to the data section.
func parseHeader(header []byte, dataLen int64) ([]TensorInfo, map[string]string, error) {
	if !utf8.Valid(header) {
		return nil, nil, errors.New("header is not valid UTF-8")
	}
	var (
		tensors  []TensorInfo
		metadata map[string]string
	)
	err := decodeJSONObject(header, "header", func(name string, value json.RawMessage) error {
		if name == metadataKey {
			if isNull(value) {
				return nil
			}
			if err := json.Unmarshal(value, &metadata); err != nil {
				return fmt.Errorf("header: %s is not an object of strings", metadataKey)
			}
			return nil
		}
		t, err := parseEntry(value, dataLen)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		t.Name = name
		tensors = append(tensors, t)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	// Tensors must not share bytes. Sort by position; empty tensors occupy
	// nothing and cannot overlap.
	byOffset := make([]*TensorInfo, 0, len(tensors))
	for i := range tensors {
		if tensors[i].Size > 0 {
			byOffset = append(byOffset, &tensors[i])
		}
	}
	slices.SortFunc(byOffset, func(a, b *TensorInfo) int { return cmp.Compare(a.Offset, b.Offset) })
	for i := 1; i < len(byOffset); i++ {
		prev, t := byOffset[i-1], byOffset[i]
		if t.Offset < prev.Offset+prev.Size {
			return nil, nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] overlap those of tensor %q [%d, %d]",
				t.Name, t.Offset, t.Offset+t.Size, prev.Name, prev.Offset, prev.Offset+prev.Size)
		}
	}
	slices.SortFunc(tensors, func(a, b TensorInfo) int { return strings.Compare(a.Name, b.Name) })
	return tensors, metadata, nil
}

// parseEntry parses the header entry of one tensor. The returned offset is
// relative to the data section of dataLen bytes.
func parseEntry(value json.RawMessage, dataLen int64) (TensorInfo, error) {
	var t TensorInfo
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(value, &fields); err != nil || fields == nil {
		return t, errors.New("header entry is not a JSON object")
	}
	field := func(key string) (json.RawMessage, error) {
		v, ok := fields[key]
		if !ok || isNull(v) {
			return nil, fmt.Errorf("header entry has no %s", key)
		}
		return v, nil
	}

	raw, err := field("dtype")
	if err != nil {
		return t, err
	}
	var dtype string
	if err := json.Unmarshal(raw, &dtype); err != nil {
		return t, fmt.Errorf("dtype %s is not a string", clip(raw))
	}
	if t.DType, err = parseHeaderDType(dtype); err != nil {
		return t, err
	}

	if raw, err = field("shape"); err != nil {
		return t, err
	}
	var shape []int64
	if err := json.Unmarshal(raw, &shape); err != nil {
		return t, fmt.Errorf("shape %s is not an array of integers", clip(raw))
	}
	t.Shape = make([]int, len(shape))
	for i, d := range shape {
		if d < 0 {
			return t, fmt.Errorf("negative dimension %d in shape %v", d, shape)
		}
		if uint64(d) > math.MaxInt {
			return t, fmt.Errorf("dimension %d in shape %v is too large", d, shape)
		}
		t.Shape[i] = int(d)
	}

	if raw, err = field("data_offsets"); err != nil {
		return t, err
	}
	var offsets []int64
	if err := json.Unmarshal(raw, &offsets); err != nil || len(offsets) != 2 {
		return t, fmt.Errorf("data_offsets %s is not a pair of integers", clip(raw))
	}
	begin, end := offsets[0], offsets[1]
	switch {
	case begin < 0 || end < 0:
		return t, fmt.Errorf("negative data_offsets [%d, %d]", begin, end)
	case begin > end:
		return t, fmt.Errorf("data_offsets [%d, %d]: begin is after end", begin, end)
	case end > dataLen:
		return t, fmt.Errorf("data_offsets [%d, %d] extend beyond the %d-byte data section", begin, end, dataLen)
	}
	size, ok := byteSize(shape, t.DType)
	if !ok {
		return t, fmt.Errorf("shape %v of %v is too large", shape, t.DType)
	}
	if size != uint64(end-begin) {
		return t, fmt.Errorf("shape %v of %v needs %d bytes, data_offsets [%d, %d] hold %d", shape, t.DType, size, begin, end, end-begin)
	}
	t.Offset, t.Size = begin, end-begin
	return t, nil
}

// byteSize returns the size in bytes of a tensor of the given shape and
// dtype, and false if it overflows a uint64.
func byteSize(shape []int64, dtype DType) (uint64, bool) {
	if slices.Contains(shape, 0) {
		return 0, true
	}
	n := uint64(dtype.Size())
	for _, d := range shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// decodeJSONObject decodes data, which must hold exactly one JSON object,
// calling fn with each member in order. A name occurring twice is an error.
// Errors other than fn's describe data as what.
func decodeJSONObject(data []byte, what string, fn func(name string, value json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%s is not valid JSON: %w", what, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("%s is not a JSON object", what)
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%s is not valid JSON: %w", what, err)
		}
		name, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%s is not valid JSON", what)
		}
		if seen[name] {
			return fmt.Errorf("%s: duplicate key %q", what, name)
		}
		seen[name] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return fmt.Errorf("%s is not valid JSON: %w", what, err)
		}
		if err := fn(name, value); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%s is not valid JSON: %w", what, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%s: trailing data after the JSON object", what)
	}
	return nil
}

func isNull(v json.RawMessage) bool {
	return string(bytes.TrimSpace(v)) == "null"
}

// clip shortens a JSON value quoted in an error message.
func clip(v json.RawMessage) string {
	const limit = 40
	if len(v) > limit {
		return string(v[:limit]) + "..."
	}
	return string(v)
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Tensors returns the tensors of the file, sorted by name.
func (f *File) Tensors() []TensorInfo {
	ts := make([]TensorInfo, len(f.tensors))
	for i, t := range f.tensors {
		ts[i] = t.clone()
	}
	return ts
}

// Tensor returns the named tensor, and whether the file holds it.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i].clone(), true
}

// Metadata returns a copy of the string metadata of the header's
// "__metadata__" entry, or nil if it has none.
func (f *File) Metadata() map[string]string {
	return maps.Clone(f.metadata)
}

// BytesRead returns the number of bytes of tensor data the File has
// converted so far.
func (f *File) BytesRead() int64 { return f.bytesRead.Load() }

// lookup returns the named tensor, or an error if there is none or the file
// is closed.
func (f *File) lookup(name string) (*TensorInfo, error) {
	if f.closed {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q: %w", f.path, name, os.ErrClosed)
	}
	i, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q: %w", f.path, name, ErrTensorNotFound)
	}
	return &f.tensors[i], nil
}

// numElements returns the element count of t as an int.
func (f *File) numElements(t *TensorInfo) (int, error) {
	n := t.Size / int64(t.DType.Size())
	if n > math.MaxInt {
		return 0, fmt.Errorf("checkpoints: %s: tensor %q: %d elements do not fit in memory", f.path, t.Name, n)
	}
	return int(n), nil
}

// ReadFloat32 reads the named tensor, converting it to float32.
func (f *File) ReadFloat32(name string) ([]float32, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	n, err := f.numElements(t)
	if err != nil {
		return nil, err
	}
	dst := make([]float32, n)
	if err := f.read(t, dst, t.Offset); err != nil {
		return nil, err
	}
	return dst, nil
}

// ReadFloat32Into reads the named tensor into dst, converting it to
// float32. The length of dst must be the number of elements of the tensor.
func (f *File) ReadFloat32Into(name string, dst []float32) error {
	t, err := f.lookup(name)
	if err != nil {
		return err
	}
	n, err := f.numElements(t)
	if err != nil {
		return err
	}
	if len(dst) != n {
		return fmt.Errorf("checkpoints: %s: tensor %q: destination holds %d values, the tensor of shape %v has %d", f.path, name, len(dst), t.Shape, n)
	}
	return f.read(t, dst, t.Offset)
}

// ReadSlice reads rows r0:r1 and columns c0:c1 of the named 2-D tensor,
// converting them to float32, and returns them row-major: (r1−r0)×(c1−c0)
// values. It reads only the bytes of the slice, one row at a time, so a
// rank can load its part of a large matrix without touching the rest.
func (f *File) ReadSlice(name string, r0, r1, c0, c1 int) ([]float32, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q: slicing needs a 2-D tensor, the shape is %v", f.path, name, t.Shape)
	}
	rows, cols := t.Shape[0], t.Shape[1]
	if r0 < 0 || r0 > r1 || r1 > rows || c0 < 0 || c0 > c1 || c1 > cols {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q: slice [%d:%d, %d:%d] out of range for shape %v", f.path, name, r0, r1, c0, c1, t.Shape)
	}
	h, w := r1-r0, c1-c0
	if int64(h)*int64(w) > math.MaxInt {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q: slice [%d:%d, %d:%d] does not fit in memory", f.path, name, r0, r1, c0, c1)
	}
	dst := make([]float32, h*w)
	if len(dst) == 0 {
		return dst, nil
	}
	es := int64(t.DType.Size())
	if w == cols { // whole rows are contiguous
		return dst, f.read(t, dst, t.Offset+int64(r0)*int64(cols)*es)
	}
	var scratch []byte
	for i := range h {
		off := t.Offset + (int64(r0+i)*int64(cols)+int64(c0))*es
		if err := f.readScratch(t, dst[i*w:(i+1)*w], off, &scratch); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// read converts len(dst) elements of tensor t starting at file offset off.
func (f *File) read(t *TensorInfo, dst []float32, off int64) error {
	var scratch []byte
	return f.readScratch(t, dst, off, &scratch)
}

// readChunk bounds the buffer used to read files that are not mapped.
const readChunk = 1 << 20

// readScratch is read, reusing *scratch as the buffer for unmapped files.
func (f *File) readScratch(t *TensorInfo, dst []float32, off int64, scratch *[]byte) error {
	es := t.DType.Size()
	n := int64(len(dst)) * int64(es)
	if f.data != nil {
		decode(dst, f.data[off:off+n], t.DType)
		f.bytesRead.Add(n)
		if f.mapped {
			f.releaseRead(off + n)
		}
		return nil
	}
	if *scratch == nil {
		*scratch = make([]byte, min(n, readChunk))
	}
	per := len(*scratch) / es
	for len(dst) > 0 {
		k := min(len(dst), per)
		b := (*scratch)[:k*es]
		if err := f.readAt(b, off); err != nil {
			return fmt.Errorf("checkpoints: %s: tensor %q: %w", f.path, t.Name, err)
		}
		decode(dst[:k], b, t.DType)
		f.bytesRead.Add(int64(len(b)))
		dst, off = dst[k:], off+int64(len(b))
	}
	return nil
}

// releaseChunk is how many bytes of the mapping are read between two
// releases of its pages.
const releaseChunk = 4 << 20

// releaseRead drops the mapping's pages below end, the end of a read, once
// a chunk of them lies past the last release: one madvise a chunk, not one
// a read. A column shard reads a short run a row, and dropping the pages
// of every run (as each read once did) made the next run fault its page
// back in: loading a tiny model spent most of its time in madvise. A
// reader that goes back (another tensor, another rank's block) moves the
// mark back; pages it finds dropped fault back in from the page cache.
func (f *File) releaseRead(end int64) {
	from := f.released.Load()
	switch {
	case end < from:
		f.released.CompareAndSwap(from, end)
	case end-from >= releaseChunk && f.released.CompareAndSwap(from, end):
		releasePages(f.data, from, end-from)
	}
}

// Close releases the file. Reads after Close fail.
func (f *File) Close() error {
	if f.closed {
		return fmt.Errorf("checkpoints: %s: %w", f.path, os.ErrClosed)
	}
	f.closed = true
	release := f.release
	f.data, f.r, f.release = nil, nil, nil
	if release != nil {
		if err := release(); err != nil {
			return fmt.Errorf("checkpoints: %s: %w", f.path, err)
		}
	}
	return nil
}
