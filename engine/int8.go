package engine

import "math"

// 8-bit blockwise moments (AdamWTensors.Int8), after Dettmers et al.'s
// 8-bit optimizers, with a linear map rather than their dynamic tree.
//
// Blocks: the whole parameter's rows are cut into blocks of Int8Block
// consecutive columns (the last of a row shorter when the row is not a
// multiple), in the index space of the whole parameter, so that a block
// does not depend on the grid. A rank quantizes each run of its
// elements that lies in one block (a piece, Int8Pieces) with a scale of
// its own: a whole block whenever the grid's cuts — X and Y column and
// row blocks, Z's flat chunks — fall on block boundaries, as they do for
// every power-of-two split of a Llama's dimensions down to 64 columns;
// then every grid holds the same codes and scales. A cut block's pieces
// are quantized apart, exactly as such but not as the whole block.
//
// Maps: the first moment m, signed, linearly: code q in −127…127
// (stored as q + 128) is scale·(q/127), scale the piece's largest |m|.
// The second moment v ≥ 0 in the fourth-root domain, so that its small
// values — which divide the update — keep resolution: code q in 0…255 is
// (scale·(q/255))⁴, scale the piece's largest ⁴√v. (A square-root
// domain ended 8% above float32 moments' loss on the size study's
// hidden-128 shape, the fourth root 3% below: TestCompactMomentsLoss.)
// The step rounds the codes stochastically (RoundBits' bits, keyed by the
// element's index in the whole parameter as bf16 moments are), so a
// code is right in expectation; a checkpoint holds the moments decoded
// to float32, and encoding them again (rounding to nearest) gives back
// the codes and scales exactly: the largest element of a piece decodes
// to its scale exactly (q/127 = ±1, q/255 = 1), so the scale comes back,
// and every other decodes to within a rounding of its code (√ of a
// rounded square is exact in binary floating point, so ⁴√ of v = (u²)²
// is u, barring underflow).

// Int8Block is the blocks' length, in columns of the whole parameter.
const Int8Block = 64

// Int8Moments are an AdamWStep parameter's 8-bit moments: M and V are I8
// tensors of codes, MScale and VScale F32 tensors of one scale a piece,
// Starts the pieces' first elements followed by the part's length.
type Int8Moments struct {
	MScale, VScale *Tensor
	Starts         []int
}

// Int8Pieces are the first elements of the pieces of a part of n
// elements placed by ix, and n last.
func Int8Pieces(ix ElementIndex, n int) []int {
	var starts []int
	int8Runs(ix, n, func(i, col, length int) {
		for j := i; j < i+length; j += Int8Block - (col+j-i)%Int8Block {
			starts = append(starts, j)
		}
	})
	return append(starts, n)
}

// Int8PieceCount is len(Int8Pieces(ix, n)) − 1, counted a row at a time.
func Int8PieceCount(ix ElementIndex, n int) int64 {
	var count int64
	int8Runs(ix, n, func(_, col, length int) { count += int64((col+length-1)/Int8Block - col/Int8Block + 1) })
	return count
}

// int8Runs calls run for each run of the part's elements in one row of
// the whole parameter: its first element, its column in the whole
// parameter and its length.
func int8Runs(ix ElementIndex, n int, run func(i, col, length int)) {
	w := ix.Col1 - ix.Col0
	for i := 0; i < n; {
		f := ix.Flat0 + i
		length := min(n-i, w-f%w) // to the end of the shard's row
		run(i, ix.Col0+f%w, length)
		i += length
	}
}

// Int8Scale is a piece's scale of moment k (0: m, 1: v) of values xs:
// the largest |x| for m, the largest ⁴√x for v.
func Int8Scale(k int, xs []float32) float32 {
	var s float32
	for _, x := range xs {
		if k == 0 {
			x = float32(math.Abs(float64(x)))
		} else {
			x = sqrt32(sqrt32(x))
		}
		s = max(s, x)
	}
	return s
}

// EncodeInt8 is the code of x in a piece of moment k with scale s,
// rounded up with probability the fraction of a code x lies above the
// one below, given 16 random bits r; r = 0x8000 rounds to nearest.
func EncodeInt8(k int, x, s float32, r uint16) uint8 {
	if s == 0 {
		if k == 0 {
			return 0x80 // m's code 0: codes are stored offset by 128
		}
		return 0
	}
	if k == 0 {
		y := float32(x/s) * 127
		q := math.Floor(float64(y) + float64(r)/65536)
		return uint8(int(max(-127, min(127, q))) + 128)
	}
	y := float32(sqrt32(sqrt32(x))/s) * 255
	return uint8(max(0, min(255, math.Floor(float64(y)+float64(r)/65536))))
}

// DecodeInt8 is the value of code q in a piece of moment k with scale s.
func DecodeInt8(k int, q uint8, s float32) float32 {
	if k == 0 {
		return s * (float32(int(q)-128) / 127)
	}
	u := s * (float32(q) / 255)
	u2 := u * u
	return u2 * u2
}

// sqrt32 is the correctly rounded float32 square root.
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }
