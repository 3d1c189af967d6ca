package cuda

import (
	"testing"

	"github.com/memtrain/memtrain/engine"
)

// Each operation's declared traffic is the sum of its operands' sizes,
// written out here by hand for a few shapes and dtypes (f = 4 bytes an
// element, b = 2, i = 4 for I32): a declaration that forgets an operand,
// counts one twice or takes the wrong dtype's size fails.
func TestTraffic(t *testing.T) {
	const f, b, i = 4, 2, 4
	F, B := engine.F32, engine.BF16
	for _, c := range []struct {
		name         string
		got          traffic
		bytes, flops float64
	}{
		{"cast 1000 bf16→f32", castTraffic(1000, F, B), 1000 * (f + b), 0},
		{"add 1000 f32", addTraffic(1000, F, F, F), 1000 * 3 * f, 1000},
		{"add 1000 bf16+f32→bf16", addTraffic(1000, B, B, F), 1000 * (b + b + f), 1000},
		{"axpy 999 bf16 += f32", axpyTraffic(999, B, F), 999 * (2*b + f), 2 * 999},
		{"scale 7 f32", scaleTraffic(7, F), 7 * 2 * f, 7},
		{"swiglu 64 bf16", swigluTraffic(64, B, B, B), 64 * 3 * b, 6 * 64},
		{"swiglu backward 64 f32", swigluBackwardTraffic(64, F, F, F, F, F), 64 * 5 * f, 13 * 64},
		// x and out [4, 64] bf16, w [64] f32, rstd [4] f32.
		{"rmsnorm 4×64", rmsnormTraffic(4, 64, B, F, B, F), 4*64*(b+b) + 64*f + 4*f, 4 * 4 * 64},
		// and the residual read, the sum written into x.
		{"add_rmsnorm 4×64", addRMSNormTraffic(4, 64, B, F, B, B, F), 4*64*(b+b+b+b) + 64*f + 4*f, 5 * 4 * 64},
		// 100 rows are 4 chunks of dw's partial sums (32 rows each,
		// rmsnormRowsPerChunk): dw_partial reads dOut, x, rstd and writes
		// 4×64 float32 partials; dw_final reads them and reads and writes
		// dw; dx reads dOut, x, w, rstd and writes dx.
		{"rmsnorm backward 100×64", rmsnormBackwardTraffic(100, 64, B, F, B, B, F, F),
			(100*64*(b+b) + 100*f + 4*64*f) + (4*64*f + 2*64*f) + (100*64*(b+b+b) + 64*f + 100*f),
			3*100*64 + 4*64 + 8*100*64},
		// y [100, 64] bf16 read and written, its f32 bias read once.
		{"add bias 100×64", addBiasTraffic(100, 64, B, F), 100*64*2*b + 64*f, 100 * 64},
		// 100 rows are 4 chunks (as RMSNormBackward's dw): dy read, 4×64
		// float32 partials written, then read, db read and written.
		{"bias grad 100×64", biasGradTraffic(100, 64, F, B), 100*64*b + 4*64*f + 4*64*f + 2*64*f, 100*64 + 4*64},
		// q [6, 4 heads, 2·16] bf16 with a table by position of 3 rows
		// (no positions read for it): invFreq, the table written; the
		// positions, a table row a token and x in place.
		{"rope by position", ropeTraffic(6, 4, 16, 3, true, B, F),
			(16*f + 3*2*16*f) + (6*i + 6*2*16*f + 2*6*4*2*16*b), 3*3*16 + 6*6*4*16},
		{"rope by token", ropeTraffic(6, 4, 16, 6, false, B, F),
			(6*i + 16*f + 6*2*16*f) + (6*i + 6*2*16*f + 2*6*4*2*16*b), 3*6*16 + 6*6*4*16},
		// logits [5, 97] f32, targets, weights, losses.
		{"cross entropy, no gradient", crossEntropyTraffic(5, 97, F, false, F), 5*97*f + 5*(i+f+f), 4 * 5 * 97},
		{"cross entropy, bf16 gradient", crossEntropyTraffic(5, 97, F, true, B), 5*97*(f+b) + 5*(i+f+f), 7 * 5 * 97},
		{"embedding 9 of 32, bf16 table", embeddingTraffic(9, 32, F, B), 9*i + 9*32*(f+b), 0},
		// 9 rows of 32 into 4 distinct rows of a bf16 table: the 9
		// positions and 5 bounds uploaded and read, 4 ids read, dOut read,
		// 4 table rows read and written.
		{"embedding backward 9 into 4 rows", embeddingBackwardTraffic(9, 32, 4, B, F),
			2*(9+5)*i + 4*i + 9*32*f + 4*32*2*b, 9 * 32},
		{"adamw 100", adamWTraffic(100, F, F, F, F, false, false, B), 100 * 7 * f, 12 * 100},
		{"adamw 100 clipped with a bf16 copy", adamWTraffic(100, F, F, F, F, true, true, B), 100 * (8*f + b), 13 * 100},
		// A split master: grad read, copy and low read and written.
		{"adamw 100, split master", compactAdamWTraffic(100, 0, true, F, false), 100 * (5*f + 4*b), 12 * 100},
		// bf16 moments, a float32 master and its copy, clipped.
		{"adamw 100, bf16 moments, clipped", compactAdamWTraffic(100, 0, false, B, true), 100 * (4*f + 4*b + b), 13 * 100},
		// 8-bit moments of 2 pieces: codes and scales read and written.
		{"adamw 100, split, int8 moments", compactAdamWTraffic(100, 2, true, engine.I8, false), 100*(f+4*b+4) + 2*4*f, 12 * 100},
	} {
		if c.got.bytes != c.bytes || c.got.flops != c.flops {
			t.Errorf("%s: %v bytes and %v flops, want %v and %v", c.name, c.got.bytes, c.got.flops, c.bytes, c.flops)
		}
	}
}

// TestTrafficIsTheCostModel ties the kernels' declarations to
// engine.Kernel.Cost, the planner's: for the memory-bound operations
// whose kernels move nothing beyond their operands (no scratch, no
// re-read the caches miss), both count the same bytes. The others differ
// by what one of them says: RMSNormBackward's float32 partial sums of dw
// and BiasGrad's of db (scratch, here only), cross-entropy's three passes
// over a row (there only).
func TestTrafficIsTheCostModel(t *testing.T) {
	sh := engine.Shaped
	for _, dts := range [][2]engine.DType{{engine.F32, engine.F32}, {engine.BF16, engine.F32}, {engine.BF16, engine.BF16}} {
		a, w := dts[0], dts[1] // activations, weights
		const rows, h, n = 37, 4096, 37 * 4096
		for _, c := range []struct {
			name string
			k    engine.Kernel
			ours traffic
		}{
			{"Add", engine.Kernel{Op: "Add", Operands: []engine.Operand{sh(a, n), sh(a, n), sh(w, n)}}, addTraffic(n, a, a, w)},
			{"SwiGLU", engine.Kernel{Op: "SwiGLU", Operands: []engine.Operand{sh(a, n), sh(a, n), sh(a, n)}}, swigluTraffic(n, a, a, a)},
			{"SwiGLUBackward", engine.Kernel{Op: "SwiGLUBackward", Operands: []engine.Operand{sh(a, n), sh(a, n), sh(a, n), sh(a, n), sh(a, n)}},
				swigluBackwardTraffic(n, a, a, a, a, a)},
			{"RMSNorm", engine.Kernel{Op: "RMSNorm", Operands: []engine.Operand{sh(a, rows, h), sh(engine.F32, rows), sh(a, rows, h), sh(w, h)}},
				rmsnormTraffic(rows, h, a, engine.F32, a, w)},
			{"AddRMSNorm", engine.Kernel{Op: "AddRMSNorm", Operands: []engine.Operand{sh(a, rows, h), sh(engine.F32, rows), sh(a, rows, h), sh(a, rows, h), sh(w, h)}},
				addRMSNormTraffic(rows, h, a, engine.F32, a, a, w)},
			{"AddBias", engine.Kernel{Op: "AddBias", Operands: []engine.Operand{sh(a, rows, h), sh(w, h)}}, addBiasTraffic(rows, h, a, w)},
			// AdamWStep on compact state, one tensor of a whole rows × h
			// parameter (its pieces its blocks), then ctl: 8 bytes of the
			// call's, beside the tensor's share.
			{"AdamWStep, split master, bf16 moments", engine.Kernel{Op: "AdamWStep", Operands: []engine.Operand{{}, sh(engine.F32, rows, h),
				sh(engine.BF16, rows, h), sh(engine.BF16, rows, h), sh(engine.BF16, rows, h), sh(engine.F32, 2)}},
				compactAdamWTraffic(n, 0, true, engine.BF16, false).plus(traffic{bytes: 8})},
			{"AdamWStep, int8 moments", engine.Kernel{Op: "AdamWStep", Operands: []engine.Operand{sh(engine.F32, rows, h), sh(engine.F32, rows, h),
				sh(engine.I8, rows, h), sh(engine.I8, rows, h), sh(engine.BF16, rows, h), sh(engine.F32, 2)}},
				compactAdamWTraffic(n, rows*h/engine.Int8Block, false, engine.I8, false).plus(traffic{bytes: 8})},
		} {
			if got, want := c.ours.bytes, c.k.Cost().Bytes; got != want {
				t.Errorf("%s %v: the kernels declare %g bytes, engine.Kernel.Cost %g", c.name, dts, got, want)
			}
		}
	}
}
