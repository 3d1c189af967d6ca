package gguf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestQ8_0Layout checks one block byte by byte against values computed by
// hand: the f16 scale max|x|/127, then round(x/d), half away from zero.
func TestQ8_0Layout(t *testing.T) {
	x := make([]float32, 64)
	for j := range 32 {
		x[j] = float32(j-16) * 0.5 // max |x| = 8 at j = 0
	}
	// the second block is all zeros: scale 0, values 0
	b, err := Encode(nil, Q8_0, x)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 2*34 {
		t.Fatalf("%d bytes for two blocks, want 68", len(b))
	}
	if got, want := binary.LittleEndian.Uint16(b), checkpoints.Float32ToF16(8.0/127); got != want {
		t.Errorf("scale bits %#04x, want %#04x (f16 of 8/127)", got, want)
	}
	for j, want := range map[int]int8{0: -127, 16: 0, 31: 119, 17: 8, 15: -8, 1: -119} {
		// (j−16)·0.5·127/8: j=31 → 119.06, j=17 → 7.94, j=1 → −119.06
		if got := int8(b[2+j]); got != want {
			t.Errorf("q[%d] = %d, want %d", j, got, want)
		}
	}
	for j, v := range b[34:] {
		if v != 0 {
			t.Fatalf("zero block: byte %d is %d", j, v)
		}
	}
	// Half away from zero: 63.5 and −63.5 round to ±64 (not 64 and −64
	// by banker's rounding to even, which would give 64 and −64 anyway;
	// 62.5 tells them apart: away from zero gives 63, to even 62).
	h := make([]float32, 32)
	h[0], h[1], h[2] = 127, 62.5, -62.5
	b, _ = Encode(nil, Q8_0, h)
	if q1, q2 := int8(b[3]), int8(b[4]); q1 != 63 || q2 != -63 {
		t.Errorf("62.5 and −62.5 quantized to %d and %d, want 63 and −63 (half away from zero)", q1, q2)
	}
	if _, err := Encode(nil, Q8_0, x[:33]); err == nil {
		t.Error("33 values encoded as Q8_0, want an error (not whole blocks)")
	}
}

// TestQ8_0Error checks the round trip of random blocks of various scales
// against the bound of the quantization, d/2 + 127·|d − f16(d)| per value,
// d the block's max|x|/127 (quant.go): at most d·(1/2 + 127·2⁻¹¹) for a
// normal f16 scale, more for the subnormal scales of the 1e-3 case.
func TestQ8_0Error(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, scale := range []float64{1e-3, 0.02, 1, 300} {
		x := make([]float32, 32*50)
		for i := range x {
			x[i] = float32(r.NormFloat64() * scale)
		}
		b, err := Encode(nil, Q8_0, x)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b, Q8_0, len(x))
		if err != nil {
			t.Fatal(err)
		}
		bound := make([]float64, len(x))
		for blk := 0; blk < len(x); blk += 32 {
			amax := 0.0
			for _, v := range x[blk : blk+32] {
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			d := float64(float32(amax) / 127)
			d16 := float64(checkpoints.F16ToFloat32(checkpoints.Float32ToF16(float32(d))))
			for j := range 32 {
				// and a float32 ulp of x/d's rounding
				bound[blk+j] = d/2 + 127*math.Abs(d-d16) + amax*0x1p-23
			}
		}
		if err := numtest.CloseBounds(got, x, bound); err != nil {
			t.Errorf("scale %g: %v", scale, err)
		}
	}
}

// TestEncodeRoundTrip: F32 is exact, F16 and BF16 are one rounding
// (relative error ≤ 2⁻¹¹ and 2⁻⁸ for normal values).
func TestEncodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 96)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, c := range []struct {
		t   TensorType
		tol numtest.Tol
	}{{F32, numtest.Tol{}}, {F16, numtest.Tol{Rel: 1.0 / 2048, Abs: 1e-7}}, {BF16, numtest.Tol{Rel: 1.0 / 256}}} {
		b, err := Encode(nil, c.t, x)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := EncodedSize(c.t, len(x)); len(b) != want {
			t.Errorf("%s: %d bytes, want %d", c.t, len(b), want)
		}
		got, err := Decode(b, c.t, len(x))
		if err != nil {
			t.Fatal(err)
		}
		if err := numtest.Close(got, x, c.tol); err != nil {
			t.Errorf("%s: %v", c.t, err)
		}
	}
}
