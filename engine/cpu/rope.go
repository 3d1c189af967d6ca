package cpu

import (
	"math"
	"slices"
	"sync"

	"github.com/memtrain/memtrain/engine"
)

// RoPE rotates x [N, heads, D] in place by the rotary position embedding,
// HuggingFace's rotate-half layout: for j < D/2, with θ = pos·invFreq[j],
//
//	x'[j]     = x[j]·cos θ − x[j+D/2]·sin θ
//	x'[j+D/2] = x[j+D/2]·cos θ + x[j]·sin θ
//
// θ is the float32 product pos·invFreq[j], as HuggingFace computes it in
// float32 (the rounding of θ matters at large positions: it moves cos θ by
// up to half an ulp of θ); cos and sin are then evaluated in float64 and
// rounded.
func (b *Backend) RoPE(x, pos, invFreq *engine.Tensor) {
	b.rope("RoPE", x, pos, invFreq, 1)
}

// RoPEBackward rotates the gradient dx [N, heads, D] by −θ in place: the
// rotation is orthogonal, so its transpose is its inverse.
func (b *Backend) RoPEBackward(dx, pos, invFreq *engine.Tensor) {
	b.rope("RoPEBackward", dx, pos, invFreq, -1)
}

// rope rotates by sign·θ.
func (b *Backend) rope(op string, x, pos, invFreq *engine.Tensor, sign float32) {
	if hasBF16(x, invFreq) {
		b.widened(op, []*engine.Tensor{x, pos, invFreq}, 1, func(t []*engine.Tensor) { b.rope(op, t[0], t[1], t[2], sign) })
		return
	}
	half := invFreq.Len()
	d := 2 * half
	n := pos.Len()
	check(half > 0, op, engine.MisuseShape, "empty invFreq")
	check(n > 0 && x.Len()%(n*d) == 0, op, engine.MisuseShape, "%v is not [%d, heads, %d]", x, n, d)
	heads := x.Len() / (n * d)
	xs, ps, fs := floats(op, x), ints(op, pos), floats(op, invFreq)
	cosT, sinT := b.angles.rows(b, fs, ps)
	b.parallelFor(n, max(1, elementGrain/(heads*d)), func(lo, hi int) {
		row := make([]float32, 2*half) // a row's cos and sin, when not the table's
		for i := lo; i < hi; i++ {
			// The angles depend on the row's position only: one row of
			// the table, or computed once for all its heads.
			cos, sin := row[:half], row[half:]
			if cosT != nil {
				p := int(ps[i]) * half
				cos, sin = cosT[p:p+half], sinT[p:p+half]
			} else {
				angleRow(cos, sin, ps[i], fs)
			}
			if sign < 0 {
				// Exact: x·(−s) rounds to −(x·s), and a − (−b) is a + b.
				neg := row[half:]
				for j, s := range sin {
					neg[j] = -s
				}
				sin = neg
			}
			for hd := range heads {
				rotate(xs[(i*heads+hd)*d:(i*heads+hd+1)*d], cos, sin)
			}
		}
	})
}

// rotate rotates one head's vector v, 2·len(cos) values, by the angles
// whose cosines and sines are cos and sin, in the rotate-half layout.
func rotate(v, cos, sin []float32) {
	half := len(cos)
	for j := range half {
		x0, x1 := v[j], v[j+half]
		v[j] = float32(x0*cos[j]) - float32(x1*sin[j])
		v[j+half] = float32(x1*cos[j]) + float32(x0*sin[j])
	}
}

// angleRow sets cos[j] and sin[j] to those of θ = float32(p·fs[j]),
// evaluated in float64 and rounded.
func angleRow(cos, sin []float32, p int32, fs []float32) {
	pf := float32(p)
	for j := range fs {
		s, c := math.Sincos(float64(float32(pf * fs[j])))
		cos[j], sin[j] = float32(c), float32(s)
	}
}

// maxAngleRows bounds the angle table: 2^16 positions of 64 frequencies
// are 32 MiB. Positions past it are evaluated per call.
const maxAngleRows = 1 << 16

// An angleTable caches the rows of angleRow for positions 0, 1, … of the
// last invFreq seen: every layer's RoPE and RoPEBackward of a step, and
// every step, rotate by the same angles, and evaluating sin and cos per
// call was a visible share of a small model's step. Its zero value is
// ready; it is safe for concurrent use.
type angleTable struct {
	mu       sync.Mutex
	freq     []float32 // the invFreq of cos and sin
	cos, sin []float32 // [positions, len(freq)]; replaced, never written, once published
}

// rows returns tables whose row p holds angleRow(p, fs) for every position
// in ps, or nil ones if a position is negative or past maxAngleRows.
func (a *angleTable) rows(b *Backend, fs []float32, ps []int32) (cos, sin []float32) {
	top := int32(-1)
	for _, p := range ps {
		if p < 0 || p >= maxAngleRows {
			return nil, nil
		}
		top = max(top, p)
	}
	half := len(fs)
	need := int(top) + 1
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.EqualFunc(a.freq, fs, sameBits) {
		a.freq, a.cos, a.sin = slices.Clone(fs), nil, nil
	}
	have := len(a.cos) / half
	if need > have {
		rows := min(max(need, 2*have, 1024), maxAngleRows)
		cos, sin := make([]float32, rows*half), make([]float32, rows*half)
		copy(cos, a.cos)
		copy(sin, a.sin)
		b.parallelFor(rows-have, max(1, elementGrain/(8*half)), func(lo, hi int) {
			for p := have + lo; p < have+hi; p++ {
				angleRow(cos[p*half:(p+1)*half], sin[p*half:(p+1)*half], int32(p), fs)
			}
		})
		a.cos, a.sin = cos, sin
	}
	return a.cos, a.sin
}

// sameBits reports whether x and y are the same float32, bit for bit (a
// NaN is itself, −0 is not +0: either would change the angles' bits).
func sameBits(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }
