package checkpoints

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// A DType is the element type of a stored tensor. The zero DType is
// [DTypeF32].
type DType int

// The element types memtrain reads and writes.
const (
	DTypeF32  DType = iota // IEEE 754 binary32
	DTypeBF16              // bfloat16: the upper half of a binary32
	DTypeF16               // IEEE 754 binary16
)

// String returns the name safetensors headers use for d: "F32", "BF16" or
// "F16".
func (d DType) String() string {
	switch d {
	case DTypeF32:
		return "F32"
	case DTypeBF16:
		return "BF16"
	case DTypeF16:
		return "F16"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// TorchName returns the name PyTorch and the torch_dtype field of a
// HuggingFace config.json use for d: "float32", "bfloat16" or "float16".
func (d DType) TorchName() string {
	switch d {
	case DTypeF32:
		return "float32"
	case DTypeBF16:
		return "bfloat16"
	case DTypeF16:
		return "float16"
	}
	return d.String()
}

// Size returns the size of one element in bytes, or 0 if d is not a valid
// DType.
func (d DType) Size() int {
	switch d {
	case DTypeF32:
		return 4
	case DTypeBF16, DTypeF16:
		return 2
	}
	return 0
}

func (d DType) valid() bool { return d.Size() != 0 }

// ParseDType parses a dtype name, ignoring case. It accepts the safetensors
// names ("F32", "BF16", "F16") and the PyTorch names ("float32", "bfloat16",
// "float16"), with or without a "torch." prefix.
func ParseDType(s string) (DType, error) {
	name := strings.ToLower(strings.TrimPrefix(s, "torch."))
	switch name {
	case "f32", "float32", "float":
		return DTypeF32, nil
	case "bf16", "bfloat16":
		return DTypeBF16, nil
	case "f16", "float16", "half":
		return DTypeF16, nil
	}
	return 0, fmt.Errorf("unsupported dtype %q (supported: F32, BF16, F16)", s)
}

// parseHeaderDType parses the dtype of a safetensors header entry, which is
// case-sensitive.
func parseHeaderDType(s string) (DType, error) {
	switch s {
	case "F32":
		return DTypeF32, nil
	case "BF16":
		return DTypeBF16, nil
	case "F16":
		return DTypeF16, nil
	// The other types the safetensors format defines are reported as
	// unsupported rather than malformed.
	case "BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F64",
		"F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64":
		return 0, fmt.Errorf("unsupported dtype %q (supported: F32, BF16, F16)", s)
	}
	return 0, fmt.Errorf("unknown dtype %q (supported: F32, BF16, F16)", s)
}

// BF16ToFloat32 converts a bfloat16 bit pattern to float32. The conversion
// is exact: bfloat16 is the upper half of a binary32, so every value,
// including subnormals, infinities and NaN payloads, is preserved.
func BF16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// Float32ToBF16 converts f to the nearest bfloat16, rounding ties to even,
// and returns its bit pattern. Values beyond the largest finite bfloat16
// round to infinity as round-to-nearest-even prescribes; infinities are
// kept; a NaN stays a NaN of the same sign, quieted, keeping the upper bits
// of its payload.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToFloat32 converts an IEEE 754 binary16 bit pattern to float32. The
// conversion is exact, including subnormals, infinities and NaN payloads.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0: // zero or subnormal: mant × 2⁻²⁴, exact in binary32
		return math.Float32frombits(sign | math.Float32bits(float32(mant)*0x1p-24))
	case 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// Float32ToF16 converts f to the nearest IEEE 754 binary16, rounding ties to
// even, and returns its bit pattern. Small values become subnormals or zero,
// values of 65520 and beyond in magnitude become infinity; a NaN stays a
// NaN of the same sign, quieted, keeping the upper bits of its payload.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7fffffff
	switch {
	case abs > 0x7f800000: // NaN
		return sign | 0x7e00 | uint16(abs>>13)&0x3ff
	case abs >= 0x477ff000: // ≥ 65520: rounds to infinity
		return sign | 0x7c00
	case abs >= 0x38800000: // ≥ 2⁻¹⁴: normal
		// Rebias the exponent from 127 to 15 and round the 23-bit mantissa
		// to 10 bits; a carry out of the mantissa correctly bumps the
		// exponent.
		abs -= (127 - 15) << 23
		return sign | uint16((abs+0xfff+(abs>>13)&1)>>13)
	case abs >= 0x33000000: // ≥ 2⁻²⁵: subnormal, or rounds up to one
		e := abs >> 23
		m := abs&0x7fffff | 0x800000
		shift := 126 - e // the value is m × 2^(e−150); units of 2⁻²⁴
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && q&1 == 1 {
			q++
		}
		return sign | uint16(q)
	}
	return sign // rounds to zero
}

// Decode converts the little-endian elements of type d in src to float32,
// storing them in dst. It returns an error unless len(src) is exactly
// len(dst) × d.Size().
func (d DType) Decode(dst []float32, src []byte) error {
	if !d.valid() {
		return fmt.Errorf("checkpoints: decode: invalid %v", d)
	}
	if len(src) != len(dst)*d.Size() {
		return fmt.Errorf("checkpoints: decode %v: %d bytes for %d elements, want %d", d, len(src), len(dst), len(dst)*d.Size())
	}
	decode(dst, src, d)
	return nil
}

// Encode converts the float32 values in src to type d, storing them
// little-endian in dst, rounding to nearest even. It returns an error unless
// len(dst) is exactly len(src) × d.Size().
func (d DType) Encode(dst []byte, src []float32) error {
	if !d.valid() {
		return fmt.Errorf("checkpoints: encode: invalid %v", d)
	}
	if len(dst) != len(src)*d.Size() {
		return fmt.Errorf("checkpoints: encode %v: %d bytes for %d elements, want %d", d, len(dst), len(src), len(src)*d.Size())
	}
	encode(dst, src, d)
	return nil
}

// decode is Decode without the checks: len(src) must be len(dst)×d.Size().
func decode(dst []float32, src []byte, d DType) {
	switch d {
	case DTypeF32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case DTypeBF16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	case DTypeF16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = F16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	}
}

// encode is Encode without the checks: len(dst) must be len(src)×d.Size().
func encode(dst []byte, src []float32, d DType) {
	switch d {
	case DTypeF32:
		dst = dst[:4*len(src)]
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case DTypeBF16:
		dst = dst[:2*len(src)]
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], Float32ToBF16(v))
		}
	case DTypeF16:
		dst = dst[:2*len(src)]
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], Float32ToF16(v))
		}
	}
}
