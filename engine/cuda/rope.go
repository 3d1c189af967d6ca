package cuda

import (
	"github.com/memtrain/memtrain/engine"
)

// RoPE rotates x [N, heads, D] in place by the rotary position embedding,
// HuggingFace's rotate-half layout; see engine.Backend for the rounding of
// θ, which this follows.
func (b *Backend) RoPE(x, pos, invFreq *engine.Tensor) {
	b.rope("RoPE", x, pos, invFreq, 1)
}

// RoPEBackward rotates the gradient dx [N, heads, D] back by −θ in place.
func (b *Backend) RoPEBackward(dx, pos, invFreq *engine.Tensor) {
	b.rope("RoPEBackward", dx, pos, invFreq, -1)
}

// rope launches two kernels: rope_table evaluates cos θ and sin θ once a
// (position, frequency) into a scratch table, in float64 rounded to
// float32 as the CPU backend does, and rope rotates every head of every
// row with the table's values, with no trigonometry of its own. The table
// is indexed by position (rows 0 … max(pos)) when that is no larger than
// one row a token — a batch of sequences repeats the same positions — and
// by token otherwise (negative or far-apart positions). The positions are
// the host's copy (see Storage): no transfer.
func (b *Backend) rope(op string, x, pos, invFreq *engine.Tensor, sign float32) {
	b.do(func() {
		xs, ps, fs := b.floatView(op, "x", x), b.intView(op, "pos", pos), b.floatView(op, "invFreq", invFreq)
		half := fs.n
		d := 2 * half
		n := ps.n
		if half == 0 {
			misuse(op, engine.MisuseShape, "empty invFreq")
		}
		if n == 0 || xs.n%(n*d) != 0 {
			misuse(op, engine.MisuseShape, "%v is not [%d, heads, %d]", x, n, d)
		}
		heads := xs.n / (n * d)
		rows, byPos := ropeTableRows(b.hostInts(ps))
		table := b.scratchBuffer(scratchRoPE, uint64(rows)*uint64(d)*4)
		posArg, byPosArg := devptr(0), int32(0)
		if byPos {
			byPosArg = 1
		} else {
			posArg = ps.ptr
		}
		b.launch(kRoPETable, elementGrid(rows*half), block1(elementThreads), table, posArg, fs.ptr, fs.dt(), int32(rows), int32(half))
		b.launch(kRoPE, grid1(n), rowThreads(heads*((half+vecElems-1)/vecElems), 256),
			xs.ptr, xs.dt(), ps.ptr, table, byPosArg, int32(heads), int32(half), sign)
	})
}

// ropeTableRows is the rows of the angle table for positions ps, and
// whether it is indexed by position (rows max(ps)+1, every position
// non-negative and the table no longer than ps) rather than by token
// (rows len(ps)).
func ropeTableRows(ps []int32) (rows int, byPos bool) {
	top := int32(-1)
	for _, p := range ps {
		if p < 0 {
			return len(ps), false
		}
		top = max(top, p)
	}
	if int(top) < len(ps) {
		return int(top) + 1, true
	}
	return len(ps), false
}

// ropeTraffic is RoPE or RoPEBackward of x [n, heads, 2·half] with an
// angle table of tableRows rows (ropeTableRows): rope_table reads the
// positions it is indexed by (none when by position) and invFreq and
// writes the table (two float32 a row and frequency; its sincos counted
// as two operations and the angle's product as one); rope reads each
// token's position and its table row (a table row is read by every
// token at that position: counted once a token, an upper bound the
// caches lower) and reads and writes x in place, six operations a pair
// of elements.
func ropeTraffic(n, heads, half, tableRows int, byPos bool, x, invFreq engine.DType) traffic {
	tablePos := 0
	if !byPos {
		tablePos = tableRows
	}
	table := traffic{
		bytes: moved(tablePos, engine.I32) + moved(half, invFreq) + moved(2*tableRows*half, engine.F32),
		flops: 3 * float64(tableRows) * float64(half),
	}
	rot := traffic{
		bytes: moved(n, engine.I32) + moved(2*n*half, engine.F32) + moved(2*n*heads*half, x, x),
		flops: 6 * float64(n) * float64(heads) * float64(half),
	}
	return table.plus(rot)
}
