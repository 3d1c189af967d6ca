package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// A File is the header of a GGUF file: its metadata and its tensors'
// descriptions.
type File struct {
	Path      string
	Version   uint32
	KVs       []KV // in the file's order
	Tensors   []TensorInfo
	Alignment uint64
	// DataOffset is where the data section starts in the file.
	DataOffset int64
}

// Value returns the metadata value of key.
func (f *File) Value(key string) (any, bool) {
	for _, kv := range f.KVs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// Limits on what a header may declare, beyond the file's size (ggml's own).
const (
	maxDims = 4 // GGML_MAX_DIMS
	// maxElements bounds a tensor's elements so that its byte size
	// cannot overflow.
	maxElements = 1 << 56
)

// Read reads the header of the GGUF file at path (ReadHeader).
func Read(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	return ReadHeader(path, f, st.Size())
}

// ReadHeader parses the header of a GGUF file of size bytes read from r;
// name (its path) is used in errors, which name the field at fault. Every
// count and length is checked against the bytes left before anything is
// allocated for it (an entry takes at least its type's bytes of the file,
// a string its 8-byte length), and every tensor's data must lie within
// the file, aligned: a hostile header costs a small multiple of its own
// size in memory (at most 2×, for a list of empty strings), never what it
// declares.
func ReadHeader(name string, r io.ReaderAt, size int64) (*File, error) {
	d := &decoder{r: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<16), size: size, name: name}
	f := &File{Path: name, Alignment: Alignment}
	magic := d.bytes("magic", 4)
	if d.err == nil && string(magic) != Magic {
		return nil, d.fail("magic", "%q is not %q: not a GGUF file", magic, Magic)
	}
	f.Version = d.u32("version")
	if d.err == nil && f.Version != Version {
		return nil, d.fail("version", "%d (want %d)", f.Version, Version)
	}
	nt := d.count("tensor_count", 8+4+8+4+8) // name length, dims, one dim, type, offset
	nkv := d.count("metadata_kv_count", 8+4+1)
	if d.err != nil {
		return nil, d.err
	}
	seen := map[string]bool{}
	for i := uint64(0); i < nkv && d.err == nil; i++ {
		key := d.str(fmt.Sprintf("metadata[%d].key", i))
		if d.err != nil {
			break
		}
		if seen[key] {
			return nil, d.fail(fmt.Sprintf("metadata %q", key), "given twice")
		}
		seen[key] = true
		v := d.value(fmt.Sprintf("metadata %q", key))
		f.KVs = append(f.KVs, KV{key, v})
		if key == "general.alignment" && d.err == nil {
			a, ok := v.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return nil, d.fail(`metadata "general.alignment"`, "%v: want a power of two as uint32", v)
			}
			f.Alignment = uint64(a)
		}
	}
	names := map[string]bool{}
	for i := uint64(0); i < nt && d.err == nil; i++ {
		field := fmt.Sprintf("tensors[%d]", i)
		t := TensorInfo{Name: d.str(field + ".name")}
		if d.err == nil {
			field = fmt.Sprintf("tensor %q", t.Name)
			if names[t.Name] {
				return nil, d.fail(field, "given twice")
			}
			names[t.Name] = true
		}
		nd := d.u32(field + ".n_dims")
		if d.err == nil && (nd == 0 || nd > maxDims) {
			return nil, d.fail(field+".n_dims", "%d (want 1 to %d)", nd, maxDims)
		}
		n := uint64(1)
		for j := uint32(0); j < nd && d.err == nil; j++ {
			dim := d.u64(fmt.Sprintf("%s.dims[%d]", field, j))
			if d.err == nil && (dim == 0 || dim > maxElements || n > maxElements/dim) {
				return nil, d.fail(fmt.Sprintf("%s.dims[%d]", field, j), "%d: the tensor would have more than 2^56 elements, or none", dim)
			}
			n *= dim
			t.Dims = append(t.Dims, dim)
		}
		t.Type = TensorType(d.u32(field + ".type"))
		t.Offset = d.u64(field + ".offset")
		f.Tensors = append(f.Tensors, t)
	}
	if d.err != nil {
		return nil, d.err
	}
	f.DataOffset = int64(align(uint64(d.pos), f.Alignment))
	for _, t := range f.Tensors {
		field := fmt.Sprintf("tensor %q", t.Name)
		n, err := t.Bytes()
		if err != nil {
			return nil, d.fail(field, "%v", err)
		}
		if t.Offset%f.Alignment != 0 {
			return nil, d.fail(field+".offset", "%d is not a multiple of the alignment %d", t.Offset, f.Alignment)
		}
		if t.Offset > uint64(size) || n > uint64(size)-t.Offset || uint64(f.DataOffset) > uint64(size)-t.Offset-n {
			return nil, d.fail(field, "%d bytes at data offset %d run past the end of the file (%d bytes)", n, t.Offset, size)
		}
	}
	return f, nil
}

// ReadTensor reads the named tensor's values (F32, F16, BF16 or Q8_0) as
// float32, in GGML's order (Dims[0] fastest).
func (f *File) ReadTensor(name string) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: %s: no tensor %q", f.Path, name)
	}
	n, err := t.Bytes()
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", f.Path, err)
	}
	fh, err := os.Open(f.Path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	b := make([]byte, n)
	if _, err := fh.ReadAt(b, f.DataOffset+int64(t.Offset)); err != nil {
		return nil, fmt.Errorf("gguf: %s: tensor %q: %w", f.Path, name, err)
	}
	v, err := Decode(b, t.Type, int(t.Elements()))
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: tensor %q: %w", f.Path, name, err)
	}
	return v, nil
}

// decoder reads a header's values, keeping the first error, which names
// the file and the field.
type decoder struct {
	r    *bufio.Reader
	pos  int64
	size int64
	name string
	err  error
	buf  [8]byte
}

func (d *decoder) fail(field, format string, args ...any) error {
	if d.err == nil {
		d.err = fmt.Errorf("gguf: %s: %s: %s", d.name, field, fmt.Sprintf(format, args...))
	}
	return d.err
}

// left is the number of bytes after the current position.
func (d *decoder) left() int64 { return d.size - d.pos }

func (d *decoder) read(field string, p []byte) {
	if d.err != nil {
		return
	}
	if int64(len(p)) > d.left() {
		d.fail(field, "%d bytes past the end of the file (%d bytes) at offset %d", len(p), d.size, d.pos)
		return
	}
	if _, err := io.ReadFull(d.r, p); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		d.fail(field, "%v", err)
		return
	}
	d.pos += int64(len(p))
}

func (d *decoder) bytes(field string, n int) []byte {
	b := make([]byte, n)
	d.read(field, b)
	return b
}

func (d *decoder) u8(field string) uint8 { d.read(field, d.buf[:1]); return d.buf[0] }
func (d *decoder) u16(field string) uint16 {
	d.read(field, d.buf[:2])
	return binary.LittleEndian.Uint16(d.buf[:])
}
func (d *decoder) u32(field string) uint32 {
	d.read(field, d.buf[:4])
	return binary.LittleEndian.Uint32(d.buf[:])
}
func (d *decoder) u64(field string) uint64 {
	d.read(field, d.buf[:8])
	return binary.LittleEndian.Uint64(d.buf[:])
}

// count reads a count of entries of at least min bytes each, which the
// rest of the file must have room for.
func (d *decoder) count(field string, min int64) uint64 {
	n := d.u64(field)
	if d.err == nil && n > uint64(d.left()/min) {
		d.fail(field, "%d entries of at least %d bytes cannot fit in the %d bytes left", n, min, d.left())
		return 0
	}
	return n
}

func (d *decoder) str(field string) string {
	n := d.u64(field + " (length)")
	if d.err == nil && n > uint64(d.left()) {
		d.fail(field, "a string of %d bytes past the end of the file (%d bytes left)", n, d.left())
		return ""
	}
	if d.err != nil {
		return ""
	}
	return string(d.bytes(field, int(n)))
}

// value reads a typed value.
func (d *decoder) value(field string) any {
	t := ValueType(d.u32(field + " (type)"))
	if d.err != nil {
		return nil
	}
	if t != TypeArray {
		return d.scalar(field, t)
	}
	et := ValueType(d.u32(field + " (array type)"))
	if d.err != nil {
		return nil
	}
	min := int64(et.size())
	switch {
	case et == TypeString:
		min = 8
	case min == 0:
		d.fail(field, "an array of type %d (want a scalar or string type)", et)
		return nil
	}
	n := d.count(field+" (array length)", min)
	if d.err != nil {
		return nil
	}
	switch et {
	case TypeUint8:
		return readArray[uint8](d, field, n, et)
	case TypeInt8:
		return readArray[int8](d, field, n, et)
	case TypeUint16:
		return readArray[uint16](d, field, n, et)
	case TypeInt16:
		return readArray[int16](d, field, n, et)
	case TypeUint32:
		return readArray[uint32](d, field, n, et)
	case TypeInt32:
		return readArray[int32](d, field, n, et)
	case TypeFloat32:
		return readArray[float32](d, field, n, et)
	case TypeBool:
		return readArray[bool](d, field, n, et)
	case TypeString:
		return readArray[string](d, field, n, et)
	case TypeUint64:
		return readArray[uint64](d, field, n, et)
	case TypeInt64:
		return readArray[int64](d, field, n, et)
	default: // TypeFloat64
		return readArray[float64](d, field, n, et)
	}
}

func readArray[T any](d *decoder, field string, n uint64, t ValueType) []T {
	out := make([]T, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		v := d.scalar(fmt.Sprintf("%s[%d]", field, i), t)
		if d.err == nil {
			out = append(out, v.(T))
		}
	}
	return out
}

func (d *decoder) scalar(field string, t ValueType) any {
	switch t {
	case TypeUint8:
		return d.u8(field)
	case TypeInt8:
		return int8(d.u8(field))
	case TypeUint16:
		return d.u16(field)
	case TypeInt16:
		return int16(d.u16(field))
	case TypeUint32:
		return d.u32(field)
	case TypeInt32:
		return int32(d.u32(field))
	case TypeFloat32:
		return math.Float32frombits(d.u32(field))
	case TypeBool:
		b := d.u8(field)
		if d.err == nil && b > 1 {
			d.fail(field, "bool %d (want 0 or 1)", b)
		}
		return b == 1
	case TypeString:
		return d.str(field)
	case TypeUint64:
		return d.u64(field)
	case TypeInt64:
		return int64(d.u64(field))
	case TypeFloat64:
		return math.Float64frombits(d.u64(field))
	}
	d.fail(field, "value type %d (want 0 to 12)", t)
	return nil
}
