package engine

import "math"

// Stochastic rounding of AdamW's moments (AdamWTensors.Round).
//
// A BF16 moment keeps 8 bits of mantissa: rounded to nearest, an update
// smaller than half a step of the moment (β2 = 0.95 moves v by 5% a step,
// 0.999 by 0.1%, below bf16's 0.4% resolution) is lost every time, so v
// stalls. Rounded stochastically — up with probability the fraction of a
// step the value lies above the lower neighbour — each moment is right in
// expectation. The random bits come from a counter-based generator keyed
// by (seed, step, tensor, moment, element), the element by its index in
// the whole parameter (ElementIndex): no state to carry, and every grid,
// however it cuts a parameter into shards and ZeRO chunks, rounds each
// element alike.

// MomentRound keys the stochastic rounding of one parameter's BF16
// moments in an AdamWStep (whose Step is the step of the key).
type MomentRound struct {
	Seed uint64
	// Tensor identifies the parameter (TensorKey of its name).
	Tensor uint32
	// Index places the step's elements in the whole parameter.
	Index ElementIndex
}

// ElementIndex maps the elements of a rank's part of a parameter to
// their indices in the whole, row-major parameter of Cols columns (a
// vector is one row): element i of the part is element Flat0 + i of the
// shard's block, which is Shard's rows × columns. A ZeRO chunk of a
// shard starting off elements in adds off to Flat0 (Offset).
type ElementIndex struct {
	Shard
	Cols int
}

// Global is the index in the whole parameter of the part's element i.
func (x ElementIndex) Global(i int) int64 {
	f := x.Flat0 + i
	w := x.Col1 - x.Col0
	return int64(x.Row0+f/w)*int64(x.Cols) + int64(x.Col0+f%w)
}

// Offset is x for the part that starts off elements into this one.
func (x ElementIndex) Offset(off int) ElementIndex {
	x.Flat0 += off
	return x
}

// TensorKey is a parameter's key for MomentRound.Tensor: FNV-1a of its
// name, so that it does not depend on the parameters' order.
func TensorKey(name string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return h
}

// RoundBits are the 16 random bits that round element index of moment
// (0: m, 1: v) of parameter tensor at step: SplitMix64's finaliser over
// the key's words, chained.
func RoundBits(seed uint64, step int, tensor uint32, moment int, index int64) uint16 {
	h := mix64(seed ^ 0x9e3779b97f4a7c15)
	h = mix64(h ^ uint64(step)<<2 ^ uint64(moment))
	h = mix64(h ^ uint64(tensor)<<32)
	h = mix64(h ^ uint64(index))
	return uint16(h >> 48)
}

// mix64 is SplitMix64's output function (Steele, Lea and Flood 2014).
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// RoundStochastic rounds x to a bfloat16 (its bits), given 16 random
// bits r: x's magnitude up to the next bfloat16 with probability equal to
// the fraction of the step it lies above the one below (the low half
// plus r carries into the high half exactly then). An infinity or NaN
// rounds to nearest even, so that it stays one.
func RoundStochastic(x float32, r uint16) uint16 {
	u := math.Float32bits(x)
	if u&0x7f800000 == 0x7f800000 {
		return uint16((u + 0x7fff + (u>>16)&1) >> 16)
	}
	// A finite magnitude below the largest bfloat16 step carries at most
	// into infinity, as rounding up the largest float32 does.
	return uint16((u + uint32(r)) >> 16)
}
