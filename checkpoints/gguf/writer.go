package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/memtrain/memtrain/internal/atomicfile"
)

// WriteFile writes a GGUF file at path, atomically (a temporary file
// renamed into place when complete; on any error nothing is left at path,
// nor is a file already there changed): the metadata kvs, then the
// tensors' descriptions with their offsets, then each tensor's data,
// which data(i, w) writes — exactly tensors[i].Bytes() bytes — in order,
// one tensor at a time. The alignment is general.alignment's when kvs
// has it (a power of two), else Alignment, which is then added to the
// metadata.
func WriteFile(path string, kvs []KV, tensors []TensorInfo, data func(i int, w io.Writer) error) error {
	alignment := uint64(Alignment)
	has := false
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("gguf: %s: general.alignment %v: want a power of two as uint32", path, kv.Value)
			}
			alignment, has = uint64(a), true
		}
	}
	if !has {
		kvs = append(kvs, KV{"general.alignment", uint32(Alignment)})
	}
	tensors = append([]TensorInfo(nil), tensors...)
	sizes := make([]uint64, len(tensors))
	var off uint64
	for i := range tensors {
		n, err := tensors[i].Bytes()
		if err != nil {
			return fmt.Errorf("gguf: %s: %w", path, err)
		}
		tensors[i].Offset, sizes[i] = off, n
		off = align(off+n, alignment)
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		cw := &countWriter{w: w}
		e := encoder{w: cw}
		e.raw([]byte(Magic))
		e.u32(Version)
		e.u64(uint64(len(tensors)))
		e.u64(uint64(len(kvs)))
		for _, kv := range kvs {
			e.str(kv.Key)
			if err := e.value(kv.Value); err != nil {
				return fmt.Errorf("gguf: %s: metadata %q: %w", path, kv.Key, err)
			}
		}
		for _, t := range tensors {
			e.str(t.Name)
			e.u32(uint32(len(t.Dims)))
			for _, d := range t.Dims {
				e.u64(d)
			}
			e.u32(uint32(t.Type))
			e.u64(t.Offset)
		}
		e.pad(alignment)
		if e.err != nil {
			return fmt.Errorf("gguf: writing %s: %w", path, e.err)
		}
		start := cw.n
		for i, t := range tensors {
			before := cw.n
			if err := data(i, cw); err != nil {
				return err
			}
			if got := cw.n - before; got != int64(sizes[i]) {
				return fmt.Errorf("gguf: %s: tensor %q: %d bytes of data written, want %d", path, t.Name, got, sizes[i])
			}
			if i+1 < len(tensors) {
				e.pad(alignment)
			}
			if e.err != nil {
				return fmt.Errorf("gguf: writing %s: %w", path, e.err)
			}
			if i+1 < len(tensors) && uint64(cw.n-start) != tensors[i+1].Offset {
				panic("gguf: tensor offsets out of step") // the plan above is wrong
			}
		}
		return nil
	})
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// encoder writes GGUF's little-endian values, keeping the first error.
type encoder struct {
	w   *countWriter
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) u8(v uint8)   { e.buf[0] = v; e.raw(e.buf[:1]) }
func (e *encoder) u16(v uint16) { binary.LittleEndian.PutUint16(e.buf[:], v); e.raw(e.buf[:2]) }
func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.buf[:], v); e.raw(e.buf[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.buf[:], v); e.raw(e.buf[:8]) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }

// pad writes zeros up to the next multiple of a from the file's start.
func (e *encoder) pad(a uint64) {
	var zero [256]byte
	n := align(uint64(e.w.n), a) - uint64(e.w.n)
	e.raw(zero[:n])
}

// value writes a metadata value: its type, then the value.
func (e *encoder) value(v any) error {
	t, ok := valueType(v)
	if !ok {
		return fmt.Errorf("cannot write a %T", v)
	}
	e.u32(uint32(t))
	if t != TypeArray {
		e.scalar(v)
		return nil
	}
	switch a := v.(type) {
	case []uint8:
		array(e, TypeUint8, a)
	case []int8:
		array(e, TypeInt8, a)
	case []uint16:
		array(e, TypeUint16, a)
	case []int16:
		array(e, TypeInt16, a)
	case []uint32:
		array(e, TypeUint32, a)
	case []int32:
		array(e, TypeInt32, a)
	case []float32:
		array(e, TypeFloat32, a)
	case []bool:
		array(e, TypeBool, a)
	case []string:
		array(e, TypeString, a)
	case []uint64:
		array(e, TypeUint64, a)
	case []int64:
		array(e, TypeInt64, a)
	case []float64:
		array(e, TypeFloat64, a)
	}
	return nil
}

func array[T any](e *encoder, t ValueType, a []T) {
	e.u32(uint32(t))
	e.u64(uint64(len(a)))
	for _, x := range a {
		e.scalar(x)
	}
}

// scalar writes a value of a fixed type or a string, without its type.
func (e *encoder) scalar(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		b := uint8(0)
		if x {
			b = 1
		}
		e.u8(b)
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	}
}

// valueType is the GGUF type of a Go value (TypeArray for a slice).
func valueType(v any) (ValueType, bool) {
	switch v.(type) {
	case uint8:
		return TypeUint8, true
	case int8:
		return TypeInt8, true
	case uint16:
		return TypeUint16, true
	case int16:
		return TypeInt16, true
	case uint32:
		return TypeUint32, true
	case int32:
		return TypeInt32, true
	case float32:
		return TypeFloat32, true
	case bool:
		return TypeBool, true
	case string:
		return TypeString, true
	case uint64:
		return TypeUint64, true
	case int64:
		return TypeInt64, true
	case float64:
		return TypeFloat64, true
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64, []int64, []float64:
		return TypeArray, true
	}
	return 0, false
}
