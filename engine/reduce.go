package engine

// SumSquaresEach returns Σx² of each tensor, as Backend.SumSquares computes
// it, in order. The sums are written side by side on the device
// (Backend.SumSquaresMulti) and read with one Download: one host synchronisation for all of them, where a
// Download a tensor stalled the stream once per parameter (a gradient
// norm's hundreds a step on a GPU).
func SumSquaresEach(b Backend, xs []*Tensor) []float32 {
	out := make([]float32, len(xs))
	if len(xs) == 0 {
		return out
	}
	acc := b.Alloc(F32, len(xs))
	defer b.Free(acc)
	b.SumSquaresMulti(acc, xs)
	b.Download(out, acc)
	return out
}
