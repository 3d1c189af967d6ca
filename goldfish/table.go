package goldfish

import "math"

// TableSize is the number of entries of the hash-table strategy's table, a
// prime.
const TableSize = 1_000_003

// TableSeed seeds the generator of the hash-table strategy's table (the 47th
// Fibonacci number, a prime), as the reference's
// torch.Generator().manual_seed(2971215073).
const TableSeed = 2971215073

// Table returns a new copy of the hash-table strategy's table: the float32
// values of torch.rand(1000003) drawn from a CPU torch.Generator seeded with
// manual_seed(2971215073). PyTorch's CPU generator is MT19937 seeded with
// init_genrand, and torch.rand for float32 takes one 32-bit output per value,
// in order, keeping its low 24 bits: entry j is (x_j & 0xFFFFFF) · 2⁻²⁴.
//
// A Masker needs only which entries are below 1/k; Table is for inspection
// and for callers that want the values themselves.
func Table() []float32 {
	t := make([]float32, TableSize)
	var g mt19937
	g.seed(TableSeed)
	for j := range t {
		t[j] = float32(g.next()&0xFFFFFF) * 0x1p-24
	}
	return t
}

// dropTable returns one bit per table entry, set when the entry is below
// thr, the float32 threshold 1/k. The entries are m·2⁻²⁴ for 24-bit
// integers m, exact in float32, so m·2⁻²⁴ < thr exactly when m < cut with
// cut = ⌈thr·2²⁴⌉ (thr·2²⁴ is exact in float64).
func dropTable(thr float32) []uint64 {
	cut := uint32(min(1<<24, math.Ceil(float64(thr)*(1<<24))))
	bits := make([]uint64, (TableSize+63)/64)
	var g mt19937
	g.seed(TableSeed)
	for j := range TableSize {
		below := (uint64(g.next()&0xFFFFFF) - uint64(cut)) >> 63 // no branch
		bits[j>>6] |= below << (j & 63)
	}
	return bits
}

// mt19937 is the 32-bit Mersenne Twister (Matsumoto and Nishimura 1998),
// the engine of PyTorch's CPU generator and of C++'s std::mt19937.
type mt19937 struct {
	state [624]uint32
	i     int
}

// seed is the reference init_genrand.
func (g *mt19937) seed(s uint32) {
	g.state[0] = s
	for i := 1; i < len(g.state); i++ {
		p := g.state[i-1]
		g.state[i] = 1812433253*(p^(p>>30)) + uint32(i)
	}
	g.i = len(g.state)
}

// next returns the next 32-bit output (genrand_int32).
func (g *mt19937) next() uint32 {
	if g.i >= len(g.state) {
		g.twist()
	}
	y := g.state[g.i]
	g.i++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

func (g *mt19937) twist() {
	const n, m = 624, 397
	s := &g.state
	mix := func(a, b, c uint32) uint32 {
		y := a&0x80000000 | b&0x7fffffff
		return c ^ y>>1 ^ -(y&1)&0x9908b0df
	}
	for i := range n - m {
		s[i] = mix(s[i], s[i+1], s[i+m])
	}
	for i := n - m; i < n-1; i++ {
		s[i] = mix(s[i], s[i+1], s[i+m-n])
	}
	s[n-1] = mix(s[n-1], s[0], s[m-1])
	g.i = 0
}
