// Package gguf writes a checkpoint as a GGUF file, the format llama.cpp,
// ollama and LM Studio load, and reads GGUF files back.
//
// A GGUF (version 3) file is a header — the magic "GGUF", the version, the
// tensor and metadata counts —, the metadata as typed key/value pairs, the
// tensors' descriptions (name, dimensions, type, offset), and then the
// tensors' data, each at an offset aligned to general.alignment (32 bytes)
// from the start of the data section, itself aligned. Everything is
// little-endian. See ggml's docs/gguf.md.
//
// Export (export.go) writes a Llama checkpoint as llama.cpp's converter
// (convert_hf_to_gguf.py) writes one: the llama architecture's metadata
// (metadata.go), the tokenizer in GGUF's form (tokenizer.go), and the
// weights under llama.cpp's names, Q and K rows permuted from HF's
// rotate-half RoPE layout to GGML's interleaved one, in F32, F16, BF16 or
// Q8_0 (quant.go), norms in F32. It streams one tensor at a time into a
// temporary file renamed into place when complete (writer.go). Read
// (reader.go) parses a file's header with every count and length bounded
// by the file's size, for tests and checks.
package gguf

import (
	"fmt"
	"strings"
)

// Magic is the first four bytes of a GGUF file, "GGUF".
const Magic = "GGUF"

// Version is the GGUF version this package writes (and the only one it
// reads).
const Version = 3

// Alignment is the alignment, in bytes, of the data section and of each
// tensor's data, written as general.alignment.
const Alignment = 32

// ValueType is the type of a metadata value.
type ValueType uint32

// GGUF's metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// size is the encoded size of a fixed-size value type, 0 for strings and
// arrays.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// A KV is one metadata entry. Value is one of uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64, or a
// slice of one of them (a GGUF array).
type KV struct {
	Key   string
	Value any
}

// TensorType is a GGML tensor type.
type TensorType uint32

// The GGML tensor types this package writes (and a few more it reads).
const (
	F32  TensorType = 0
	F16  TensorType = 1
	Q4_0 TensorType = 2
	Q4_1 TensorType = 3
	Q5_0 TensorType = 6
	Q5_1 TensorType = 7
	Q8_0 TensorType = 8
	Q8_1 TensorType = 9
	I8   TensorType = 24
	I16  TensorType = 25
	I32  TensorType = 26
	I64  TensorType = 27
	F64  TensorType = 28
	BF16 TensorType = 30
)

// layout is a tensor type's block: elements and bytes.
var layouts = map[TensorType]struct {
	name          string
	block, nbytes int
}{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2}, F64: {"F64", 1, 8},
	I8: {"I8", 1, 1}, I16: {"I16", 1, 2}, I32: {"I32", 1, 4}, I64: {"I64", 1, 8},
	Q4_0: {"Q4_0", 32, 18}, Q4_1: {"Q4_1", 32, 20}, Q5_0: {"Q5_0", 32, 22},
	Q5_1: {"Q5_1", 32, 24}, Q8_0: {"Q8_0", 32, 34}, Q8_1: {"Q8_1", 32, 36},
}

func (t TensorType) String() string {
	if l, ok := layouts[t]; ok {
		return l.name
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// ParseTensorType reads a type's name, case-insensitively ("q8_0").
func ParseTensorType(s string) (TensorType, error) {
	for t, l := range layouts {
		if strings.EqualFold(l.name, s) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("gguf: unknown tensor type %q", s)
}

// Block is the number of elements of a type's block (32 for the quantized
// ones, 1 otherwise); 0 for an unknown type.
func (t TensorType) Block() int { return layouts[t].block }

// BlockBytes is the size in bytes of one block.
func (t TensorType) BlockBytes() int { return layouts[t].nbytes }

// A TensorInfo describes one tensor of a GGUF file.
type TensorInfo struct {
	Name string
	// Dims are GGML's, innermost first: an HF [rows, cols] weight is
	// {cols, rows}.
	Dims []uint64
	Type TensorType
	// Offset is where the data starts, from the start of the data
	// section (set by the writer).
	Offset uint64
}

// Elements is the product of the dimensions.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Bytes is the size of the tensor's data; it fails when the innermost
// dimension is not a whole number of blocks or the type is unknown.
func (t TensorInfo) Bytes() (uint64, error) {
	l, ok := layouts[t.Type]
	if !ok {
		return 0, fmt.Errorf("tensor %q: unknown type %d", t.Name, uint32(t.Type))
	}
	if len(t.Dims) == 0 || t.Dims[0]%uint64(l.block) != 0 {
		return 0, fmt.Errorf("tensor %q: dimensions %v are not whole %s blocks of %d", t.Name, t.Dims, l.name, l.block)
	}
	return t.Elements() / uint64(l.block) * uint64(l.nbytes), nil
}

// align rounds n up to a multiple of a.
func align(n, a uint64) uint64 { return (n + a - 1) / a * a }
