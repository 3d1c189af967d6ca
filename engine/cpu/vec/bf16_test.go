package vec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// TestWidenBF16 widens every bf16 bit pattern, at every offset into a
// block, on every level: exactly the upper half of the float32.
func TestWidenBF16(t *testing.T) {
	src := make([]uint16, 1<<16+37)
	for i := range src {
		src[i] = uint16(i)
	}
	want := make([]float32, len(src))
	for i, h := range src {
		want[i] = math.Float32frombits(uint32(h) << 16)
	}
	eachLevel(t, func(t *testing.T) {
		for _, off := range []int{0, 5, 16} {
			dst := make([]float32, len(src))
			WidenBF16(dst[off:], src[off:])
			if err := numtest.Equal(dst[off:], want[off:]); err != nil {
				t.Fatalf("offset %d (element i: the bf16 pattern %d+i): %v", off, off, err)
			}
		}
	})
}

// nearestBF16 is the bf16 nearest to a non-NaN x, ties to even, found by
// comparing x with its two neighbouring bf16 values in float64 — an
// overflow rounds to ±Inf, the neighbour past the largest finite bf16
// counting as ±2¹²⁸ — independently of roundBF16's integer carry.
func nearestBF16(x float32) uint16 {
	bits := math.Float32bits(x)
	lo := uint16(bits >> 16) // toward zero
	if bits&0xffff == 0 {
		return lo
	}
	hi := lo + 1 // away from zero
	value := func(h uint16) float64 {
		if h&0x7fff == 0x7f80 {
			return math.Copysign(math.Ldexp(1, 128), float64(x))
		}
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	dlo, dhi := math.Abs(float64(x)-value(lo)), math.Abs(float64(x)-value(hi))
	switch {
	case dlo < dhi:
		return lo
	case dhi < dlo:
		return hi
	case lo&1 == 0:
		return lo
	}
	return hi
}

// TestRoundBF16 rounds a sweep of float32 bit patterns (every 1009th, and
// the specials: ±0, subnormals, ties, the largest finite values and their
// neighbours, ±Inf, quiet and signalling NaNs) on every level, against
// nearestBF16 and, for NaNs, the quieted upper half.
func TestRoundBF16(t *testing.T) {
	var xs []float32
	for b := uint64(0); b < 1<<32; b += 1009 {
		xs = append(xs, math.Float32frombits(uint32(b)))
	}
	for _, b := range []uint32{0, 0x80000000, 1, 0x8000ffff, 0x00008000, 0x00018000, 0x3f808000, 0x3f818000,
		0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7f8000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xff810000, 0x7fffffff} {
		xs = append(xs, math.Float32frombits(b))
	}
	rng := rand.New(rand.NewPCG(9, 9))
	rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	eachLevel(t, func(t *testing.T) {
		dst := make([]uint16, len(xs))
		RoundBF16(dst[3:], xs[3:])
		RoundBF16(dst[:3], xs[:3])
		for i, x := range xs {
			bits := math.Float32bits(x)
			want := uint16(bits>>16) | 0x0040
			if x == x {
				want = nearestBF16(x)
			}
			if dst[i] != want {
				t.Fatalf("%#08x rounded to %#04x, want %#04x", bits, dst[i], want)
			}
		}
	})
}
