package engine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSplitF32 joins every split back bit for bit: every high half with
// the low halves around the rounding boundary (the ties among them) and
// random ones, and random float32s; a NaN comes back a NaN.
func TestSplitF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lows := []uint32{0, 1, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff}
	check := func(u uint32) {
		x := math.Float32frombits(u)
		hi, lo := SplitF32(x)
		got := JoinF32(hi, lo)
		if math.IsNaN(float64(x)) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("SplitF32(NaN %#08x) joins to %v", u, got)
			}
			return
		}
		if math.Float32bits(got) != u {
			t.Fatalf("%#08x splits to %#04x, %#04x and joins to %#08x", u, hi, lo, math.Float32bits(got))
		}
		// hi is x rounded to nearest even but on a tie.
		if even := uint16((u + 0x7fff + (u>>16)&1) >> 16); u&0xffff != 0x8000 && hi != even {
			t.Fatalf("%#08x: high half %#04x, nearest even %#04x", u, hi, even)
		}
	}
	for h := uint32(0); h < 1<<16; h++ {
		for _, l := range lows {
			check(h<<16 | l)
		}
		check(h<<16 | rng.Uint32()&0xffff)
	}
	for range 1 << 20 {
		check(rng.Uint32())
	}
}

// TestSplitF32RoundsToNearest: the high half is the nearest-even rounding
// except on the ties SplitF32's comment names.
func TestSplitF32RoundsToNearest(t *testing.T) {
	cases := []struct {
		x  uint32
		hi uint16
	}{
		{0x3f80_7fff, 0x3f80}, // below the tie: down
		{0x3f80_8001, 0x3f81}, // above: up
		{0x3f81_8000, 0x3f82}, // a tie, odd upper half: up, as to even
		{0x3f80_8000, 0x3f81}, // a tie, even upper half: away from zero (nearest even: 0x3f80)
		{0xbf80_8000, 0xbf81}, // the same, negative
		{0x7f7f_ffff, 0x7f80}, // the largest float32 rounds to infinity, as to even
	}
	for _, c := range cases {
		if hi, _ := SplitF32(math.Float32frombits(c.x)); hi != c.hi {
			t.Errorf("SplitF32(%#08x) high half %#04x, want %#04x", c.x, hi, c.hi)
		}
	}
}
