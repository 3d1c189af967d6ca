package enginetest

import (
	"fmt"

	"github.com/memtrain/memtrain/engine"
)

// testBias checks AddBias and BiasGrad on F32 tensors, testBiasBF16 on
// the mixed-precision dtypes (a BF16 y or dy, a bias that is F32 — its
// master — or BF16).
func testBias(h *harness) { biasCases(h, [][2]engine.DType{{engine.F32, engine.F32}}) }

func testBiasBF16(h *harness) {
	biasCases(h, [][2]engine.DType{{engine.BF16, engine.F32}, {engine.BF16, engine.BF16}, {engine.F32, engine.BF16}})
}

// biasCases runs AddBias and BiasGrad for each pair of dtypes (y and dy,
// bias) over shapes whose rows are one, few, none and many (a GPU's
// chunks of rows: 1000 and more) and whose columns are one, odd, and
// whole and partial multiples of a GPU's 8-element vectors, against the
// float64 references of the values the tensors hold (bf16-rounded where
// BF16). AddBias rounds once per element (tolElem of the largest value,
// and a BF16 y's own rounding, bf16Unit of each: closeBF16), and is
// moreover bit for bit the float32 sum rounded once to y's dtype, which
// the interface prescribes; BiasGrad
// sums rows terms into an accumulated db, twice, so its tolerance is a
// sum's (sqrtTol(tolSum, rows)), as RMSNormBackward's dw.
func biasCases(h *harness, dts [][2]engine.DType) {
	for _, dt := range dts {
		ydt, bdt := dt[0], dt[1]
		put := func(dt engine.DType, x []float32, shape ...int) *engine.Tensor {
			if dt == engine.BF16 {
				return h.bf16(x, shape...)
			}
			return h.f32(x, shape...)
		}
		// held is the values a tensor of dt holds after Upload of x.
		held := func(dt engine.DType, x []float32) []float32 {
			if dt == engine.BF16 {
				return rounded(x)
			}
			return x
		}
		for _, c := range []struct{ rows, cols int }{{1, 1}, {7, 3}, {1000, 129}, {1031, 64}, {3, 8}, {0, 5}, {5, 1}} {
			name := fmt.Sprintf("%d×%d y %v bias %v", c.rows, c.cols, ydt, bdt)
			y, bias := h.randn(c.rows*c.cols, 1), h.randn(c.cols, 1)
			ty := put(ydt, y, c.rows, c.cols)
			h.be.AddBias(ty, put(bdt, bias, c.cols))
			want := refAddBias(f64(held(ydt, y)), f64(held(bdt, bias)))
			got := h.get(ty)
			if ydt == engine.BF16 {
				h.closeBF16("AddBias "+name, got, want, tolElem, 1e-6)
			} else {
				h.close("AddBias "+name, got, want, tolElem)
			}
			// And bit for bit the contract's arithmetic: the float32 sum of
			// the values held, rounded once to y's dtype.
			exact := append([]float32(nil), held(ydt, y)...)
			for j, v := range held(bdt, bias) {
				for r := range c.rows {
					exact[r*c.cols+j] += v
				}
			}
			h.equal("AddBias, the float32 sum rounded once, "+name, got, held(ydt, exact))

			dy, db0 := h.randn(c.rows*c.cols, 1), h.randn(c.cols, 1)
			tdy, db := put(ydt, dy, c.rows, c.cols), h.f32(db0, c.cols)
			h.be.BiasGrad(db, tdy)
			h.be.BiasGrad(db, tdy)
			h.close("BiasGrad twice "+name, h.get(db), addScaled(db0, 2, refBiasGrad(f64(held(ydt, dy)), c.cols)), sqrtTol(tolSum, c.rows))
			h.equal("BiasGrad leaves dy "+name, h.get(tdy), held(ydt, dy))
		}
	}
}
