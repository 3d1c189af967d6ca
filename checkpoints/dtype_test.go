package checkpoints

import (
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

func TestParseDType(t *testing.T) {
	tests := []struct {
		in   string
		want DType
	}{
		{"F32", DTypeF32}, {"f32", DTypeF32}, {"float32", DTypeF32}, {"FLOAT32", DTypeF32}, {"torch.float32", DTypeF32},
		{"BF16", DTypeBF16}, {"bf16", DTypeBF16}, {"bfloat16", DTypeBF16}, {"BFloat16", DTypeBF16}, {"torch.bfloat16", DTypeBF16},
		{"F16", DTypeF16}, {"f16", DTypeF16}, {"float16", DTypeF16}, {"Float16", DTypeF16}, {"half", DTypeF16},
	}
	for _, tt := range tests {
		got, err := ParseDType(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "F64", "float64", "I64", "int8", "U8", "fp8", "bf 16", "torch."} {
		if _, err := ParseDType(in); err == nil || !strings.Contains(err.Error(), "F32, BF16, F16") {
			t.Errorf("ParseDType(%q) error = %v, want one listing the supported dtypes", in, err)
		}
	}
}

func TestDTypeNames(t *testing.T) {
	tests := []struct {
		d           DType
		name, torch string
		size        int
	}{
		{DTypeF32, "F32", "float32", 4},
		{DTypeBF16, "BF16", "bfloat16", 2},
		{DTypeF16, "F16", "float16", 2},
		{DType(9), "DType(9)", "DType(9)", 0},
		{DType(-1), "DType(-1)", "DType(-1)", 0},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.name {
			t.Errorf("%d.String() = %q, want %q", int(tt.d), got, tt.name)
		}
		if got := tt.d.TorchName(); got != tt.torch {
			t.Errorf("%v.TorchName() = %q, want %q", tt.d, got, tt.torch)
		}
		if got := tt.d.Size(); got != tt.size {
			t.Errorf("%v.Size() = %d, want %d", tt.d, got, tt.size)
		}
		if tt.size != 0 {
			for _, s := range []string{tt.name, tt.torch} {
				if got, err := ParseDType(s); err != nil || got != tt.d {
					t.Errorf("ParseDType(%q) = %v, %v; want %v", s, got, err, tt.d)
				}
			}
		}
	}
	var zero DType
	if zero != DTypeF32 {
		t.Errorf("zero DType is %v, want F32", zero)
	}
}

func TestFloat32ToBF16(t *testing.T) {
	tests := []struct {
		name string
		in   uint32
		want uint16
	}{
		{"zero", 0x00000000, 0x0000},
		{"negative zero", 0x80000000, 0x8000},
		{"one", 0x3f800000, 0x3f80},
		{"exact", 0xc0490000, 0xc049},
		{"below tie", 0x3f807fff, 0x3f80},
		{"tie to even, down", 0x3f808000, 0x3f80},
		{"tie to even, up", 0x3f818000, 0x3f82},
		{"above tie", 0x3f808001, 0x3f81},
		{"negative tie", 0xbf818000, 0xbf82},
		{"carry into exponent", 0x3fff8000, 0x4000},
		{"largest finite", 0x7f7f0000, 0x7f7f},
		{"below overflow", 0x7f7f7fff, 0x7f7f},
		{"overflow tie rounds to inf", 0x7f7f8000, 0x7f80},
		{"float32 max", 0x7f7fffff, 0x7f80},
		{"negative overflow", 0xff7fffff, 0xff80},
		{"inf", 0x7f800000, 0x7f80},
		{"negative inf", 0xff800000, 0xff80},
		{"smallest subnormal", 0x00000001, 0x0000},
		{"subnormal tie to even, up", 0x00018000, 0x0002},
		{"subnormal tie to even, down", 0x00008000, 0x0000},
		{"largest subnormal rounds to normal", 0x007fffff, 0x0080},
		{"negative subnormal", 0x80012345, 0x8001},
		{"quiet NaN", 0x7fc00000, 0x7fc0},
		{"negative quiet NaN", 0xffc00000, 0xffc0},
		{"NaN payload kept", 0x7fd50000, 0x7fd5},
		{"signalling NaN with low payload stays NaN", 0x7f800001, 0x7fc0},
		{"signalling NaN quieted", 0x7fa00000, 0x7fe0},
		{"negative signalling NaN", 0xff800100, 0xffc0},
		{"NaN does not round into inf", 0x7fffffff, 0x7fff},
	}
	for _, tt := range tests {
		if got := Float32ToBF16(math.Float32frombits(tt.in)); got != tt.want {
			t.Errorf("%s: Float32ToBF16(%#08x) = %#04x, want %#04x", tt.name, tt.in, got, tt.want)
		}
	}
}

func TestFloat32ToF16(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		bits uint32 // used when in is 0
		want uint16
	}{
		{name: "zero", in: 0, want: 0x0000},
		{name: "negative zero", bits: 0x80000000, want: 0x8000},
		{name: "one", in: 1, want: 0x3c00},
		{name: "minus two", in: -2, want: 0xc000},
		{name: "tie to even, down", bits: 0x3f801000, want: 0x3c00},
		{name: "tie to even, up", bits: 0x3f803000, want: 0x3c02},
		{name: "above tie", bits: 0x3f801001, want: 0x3c01},
		{name: "carry into exponent", bits: 0x3ffff000, want: 0x4000},
		{name: "max", in: 65504, want: 0x7bff},
		{name: "below overflow", in: 65519, want: 0x7bff},
		{name: "overflow tie", in: 65520, want: 0x7c00},
		{name: "overflow", in: 1e6, want: 0x7c00},
		{name: "negative overflow", in: -70000, want: 0xfc00},
		{name: "float32 max", bits: 0x7f7fffff, want: 0x7c00},
		{name: "inf", in: float32(math.Inf(1)), want: 0x7c00},
		{name: "negative inf", in: float32(math.Inf(-1)), want: 0xfc00},
		{name: "smallest normal", in: 0x1p-14, want: 0x0400},
		{name: "largest subnormal", in: 0x3ffp-24, want: 0x03ff},
		{name: "subnormal/normal tie", in: 0x7ffp-25, want: 0x0400},
		{name: "smallest subnormal", in: 0x1p-24, want: 0x0001},
		{name: "negative smallest subnormal", in: -0x1p-24, want: 0x8001},
		{name: "half the smallest subnormal ties to zero", in: 0x1p-25, want: 0x0000},
		{name: "above half the smallest subnormal", bits: 0x33000001, want: 0x0001},
		{name: "1.5 units ties up to 2", in: 0x3p-25, want: 0x0002},
		{name: "2.5 units ties down to 2", in: 0x5p-25, want: 0x0002},
		{name: "tiny", in: 1e-10, want: 0x0000},
		{name: "float32 subnormal", bits: 0x00000001, want: 0x0000},
		{name: "negative tiny", in: -1e-10, want: 0x8000},
		{name: "quiet NaN", bits: 0x7fc00000, want: 0x7e00},
		{name: "negative quiet NaN", bits: 0xffc00000, want: 0xfe00},
		{name: "NaN payload kept", bits: 0x7fd54000, want: 0x7eaa},
		{name: "signalling NaN with low payload stays NaN", bits: 0x7f800001, want: 0x7e00},
		{name: "signalling NaN quieted", bits: 0x7fa00000, want: 0x7f00},
	}
	for _, tt := range tests {
		in := tt.in
		if tt.bits != 0 {
			in = math.Float32frombits(tt.bits)
		}
		if got := Float32ToF16(in); got != tt.want {
			t.Errorf("%s: Float32ToF16(%g = %#08x) = %#04x, want %#04x", tt.name, in, math.Float32bits(in), got, tt.want)
		}
	}
}

func TestBF16ToFloat32Exhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := BF16ToFloat32(h)
		if got, want := math.Float32bits(f), uint32(h)<<16; got != want {
			t.Fatalf("BF16ToFloat32(%#04x) = %#08x, want %#08x", h, got, want)
		}
		back := Float32ToBF16(f)
		if isNaN16(h, 0x7f80) {
			// NaNs come back quieted, with sign and payload.
			if back != h|0x0040 {
				t.Fatalf("Float32ToBF16(BF16ToFloat32(%#04x)) = %#04x, want %#04x", h, back, h|0x0040)
			}
			continue
		}
		if back != h {
			t.Fatalf("Float32ToBF16(BF16ToFloat32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestF16ToFloat32Exhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := F16ToFloat32(h)
		if isNaN16(h, 0x7c00) {
			b := math.Float32bits(f)
			if !math.IsNaN(float64(f)) || b>>31 != uint32(h>>15) || b>>13&0x3ff != uint32(h&0x3ff) || b&0x1fff != 0 {
				t.Fatalf("F16ToFloat32(%#04x) = %#08x, want a NaN keeping sign and payload", h, b)
			}
			if back := Float32ToF16(f); back != h|0x0200 {
				t.Fatalf("Float32ToF16(F16ToFloat32(%#04x)) = %#04x, want %#04x", h, back, h|0x0200)
			}
			continue
		}
		if want := refF16Value(h); float64(f) != want || math.Signbit(float64(f)) != math.Signbit(want) {
			t.Fatalf("F16ToFloat32(%#04x) = %g, want %g", h, f, want)
		}
		if back := Float32ToF16(f); back != h {
			t.Fatalf("Float32ToF16(F16ToFloat32(%#04x)) = %#04x", h, back)
		}
	}
}

// isNaN16 reports whether the 16-bit pattern h, whose exponent bits are
// expMask, is a NaN.
func isNaN16(h, expMask uint16) bool {
	return h&expMask == expMask && h&^expMask&0x7fff != 0
}

// refF16Value is the value of the non-NaN binary16 pattern h, computed
// independently of F16ToFloat32.
func refF16Value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, mant := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return math.Copysign(math.Ldexp(mant, -24), sign)
	case 0x1f:
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1+mant/1024, exp-15)
}

// refRound rounds the non-NaN x to the nearest of the finite values
// ladder[0..] (ascending, non-negative, indexed by bit pattern), rounding
// ties to the even pattern and beyond the largest to infinity, whose
// pattern is len(ladder). It returns the pattern of |x|.
func refRound(x float64, ladder []float64, inf float64) int {
	ax := math.Abs(x)
	if ax >= inf {
		return len(ladder)
	}
	next := func(k int) float64 {
		if k == len(ladder) {
			return inf
		}
		return ladder[k]
	}
	k := sort.Search(len(ladder), func(i int) bool { return ladder[i] > ax }) - 1
	lo, hi := ladder[k], next(k+1)
	switch d1, d2 := ax-lo, hi-ax; {
	case d1 < d2:
		return k
	case d1 > d2:
		return k + 1
	case k%2 == 0:
		return k
	}
	return k + 1
}

// TestConversionsMatchReference checks Float32ToBF16 and Float32ToF16
// against round-to-nearest-even computed by search over all finite values
// of the narrow type.
func TestConversionsMatchReference(t *testing.T) {
	bf16Ladder := make([]float64, 0x7f80)
	for i := range bf16Ladder {
		bf16Ladder[i] = float64(BF16ToFloat32(uint16(i)))
	}
	f16Ladder := make([]float64, 0x7c00)
	for i := range f16Ladder {
		f16Ladder[i] = refF16Value(uint16(i))
	}
	// The infinity rounding boundary is 2^(emax+1): a value halfway
	// between the largest finite and it rounds to even, infinity.
	bf16Inf, f16Inf := math.Ldexp(1, 128), math.Ldexp(1, 16)

	rng := rand.New(rand.NewPCG(1, 2))
	n := 1 << 20
	if testing.Short() {
		n = 1 << 16
	}
	for i := range n {
		var b uint32
		switch i % 4 {
		case 0:
			b = rng.Uint32()
		case 1: // the binary16 range
			b = rng.Uint32()&0x807fffff | (101+rng.Uint32N(43))<<23
		case 2: // bfloat16 ties
			b = rng.Uint32()&0xffff0000 | 0x8000
		case 3: // binary16 ties
			b = rng.Uint32()&0xffffe000 | 0x1000
		}
		f := math.Float32frombits(b)
		if math.IsNaN(float64(f)) {
			continue
		}
		sign := uint16(b>>16) & 0x8000
		if got, want := Float32ToBF16(f), sign|uint16(refRound(float64(f), bf16Ladder, bf16Inf)); got != want {
			t.Fatalf("Float32ToBF16(%#08x) = %#04x, want %#04x", b, got, want)
		}
		if got, want := Float32ToF16(f), sign|uint16(refRound(float64(f), f16Ladder, f16Inf)); got != want {
			t.Fatalf("Float32ToF16(%#08x) = %#04x, want %#04x", b, got, want)
		}
	}
}

func TestDecodeEncode(t *testing.T) {
	vals := []float32{0, 1, -2.5, 3.140625, float32(math.Inf(-1)), 1e-7, 65504, -0.0078125}
	for _, d := range []DType{DTypeF32, DTypeBF16, DTypeF16} {
		buf := make([]byte, len(vals)*d.Size())
		if err := d.Encode(buf, vals); err != nil {
			t.Fatalf("%v.Encode: %v", d, err)
		}
		got := make([]float32, len(vals))
		if err := d.Decode(got, buf); err != nil {
			t.Fatalf("%v.Decode: %v", d, err)
		}
		want := make([]float32, len(vals))
		for i, v := range vals {
			want[i] = roundTo(d, v)
		}
		if err := numtest.Equal(got, want); err != nil {
			t.Errorf("%v: %v", d, err)
		}
		if err := d.Decode(got, buf[1:]); err == nil {
			t.Errorf("%v.Decode accepted a short source", d)
		}
		if err := d.Encode(buf[:len(buf)-1], vals); err == nil {
			t.Errorf("%v.Encode accepted a short destination", d)
		}
	}
	if err := DType(7).Decode(nil, nil); err == nil {
		t.Error("Decode accepted an invalid dtype")
	}
	if err := DType(7).Encode(nil, nil); err == nil {
		t.Error("Encode accepted an invalid dtype")
	}
}

// roundTo returns v as stored in type d and read back.
func roundTo(d DType, v float32) float32 {
	switch d {
	case DTypeBF16:
		return BF16ToFloat32(Float32ToBF16(v))
	case DTypeF16:
		return F16ToFloat32(Float32ToF16(v))
	}
	return v
}

func benchmarkDecode(b *testing.B, d DType) {
	const n = 1 << 20
	src := make([]byte, n*d.Size())
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]float32, n)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		decode(dst, src, d)
	}
}

func BenchmarkDecodeBF16(b *testing.B) { benchmarkDecode(b, DTypeBF16) }
func BenchmarkDecodeF16(b *testing.B)  { benchmarkDecode(b, DTypeF16) }
func BenchmarkDecodeF32(b *testing.B)  { benchmarkDecode(b, DTypeF32) }

func BenchmarkEncodeBF16(b *testing.B) {
	const n = 1 << 20
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i) * 0.001
	}
	dst := make([]byte, 2*n)
	b.SetBytes(2 * n)
	for b.Loop() {
		encode(dst, src, DTypeBF16)
	}
}
