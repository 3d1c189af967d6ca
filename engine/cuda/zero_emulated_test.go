package cuda

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestZeROChunkStepEmulated: finetune's ZeRO-1 step on the GPU backend —
// AdamWStep on each data rank's comm.Chunk views of a parameter, its
// gradient and its bf16 copy, then the copy (or, without one, the
// parameter) all-gathered in place over NCCL — leaves every rank the
// whole step's parameter, copy and moments' chunks bit for bit, with
// chunks that do not divide the tensor (NCCL's padded tail).
func TestZeROChunkStepEmulated(t *testing.T) {
	const ranks = 2
	shapes := [][]int{{7, 5}, {16}}
	backends := make([]*Backend, ranks)
	for i := range backends {
		backends[i] = newFake(t, i, GemmF32)
	}
	worlds, err := NewNCCLGroup(backends)
	if err != nil {
		t.Fatal(err)
	}
	h := engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 3}
	r := rand.New(rand.NewPCG(3, 1))
	host := func(n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = scale * (r.Float32()*2 - 1)
		}
		return v
	}
	type init struct{ p, g, m, v []float32 }
	inits := make([]init, len(shapes))
	for i, s := range shapes {
		n := engine.Elements(s)
		inits[i] = init{host(n, 1), host(n, 0.1), host(n, 0.01), host(n, 0)}
		for j := range inits[i].v {
			inits[i].v[j] = inits[i].v[j]*inits[i].v[j] + 1e-4
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for rank := range ranks {
		wg.Go(func() {
			b, c := backends[rank], worlds[rank]
			fail := func(format string, args ...any) {
				mu.Lock()
				defer mu.Unlock()
				t.Errorf("rank %d: %s", rank, fmt.Sprintf(format, args...))
			}
			up := func(v []float32, s ...int) *engine.Tensor {
				x := b.Alloc(engine.F32, s...)
				b.Upload(x, v)
				return x
			}
			ctl := up([]float32{4, 1}, 2) // ‖g‖² 4, above the clip of 1: clipped
			// whole: the unsharded step's tensors; zs: the ZeRO rank's
			// (whole parameter, gradient and copy; its chunk's moments);
			// chunked: zs' chunk views, as AdamWStep takes them.
			var whole, zs, chunked []engine.AdamWTensors
			for i, s := range shapes {
				in := inits[i]
				n := engine.Elements(s)
				off, k := comm.Chunk(n, ranks, rank)
				w := engine.AdamWTensors{Param: up(in.p, s...), Grad: up(in.g, s...), M: up(in.m, n), V: up(in.v, n), WeightDecay: 0.1}
				z := engine.AdamWTensors{Param: up(in.p, s...), Grad: up(in.g, s...), M: up(in.m[off:off+k], k), V: up(in.v[off:off+k], k), WeightDecay: 0.1}
				if len(s) == 2 { // a matrix: with its bf16 copy
					w.Copy, z.Copy = b.Alloc(engine.BF16, s...), b.Alloc(engine.BF16, s...)
				}
				view := func(t *engine.Tensor) *engine.Tensor {
					if t == nil {
						return nil
					}
					return t.View(off, k)
				}
				whole, zs = append(whole, w), append(zs, z)
				chunked = append(chunked, engine.AdamWTensors{Param: view(z.Param), Grad: view(z.Grad), M: z.M, V: z.V, Copy: view(z.Copy), WeightDecay: 0.1})
			}
			b.AdamWStep(whole, h, 1, ctl)
			b.AdamWStep(chunked, h, 1, ctl)
			var rs comm.Requests
			for i, s := range shapes {
				z := zs[i]
				target := z.Param
				if z.Copy != nil {
					target = z.Copy
				}
				off, k := comm.Chunk(engine.Elements(s), ranks, rank)
				rs = append(rs, c.IAllGather(target, target.View(off, k)))
			}
			if err := rs.Wait(); err != nil {
				fail("all-gather: %v", err)
				return
			}
			down := func(x *engine.Tensor) []float32 {
				v := make([]float32, x.Len())
				b.Download(v, x)
				return v
			}
			for i, s := range shapes {
				w, z := whole[i], zs[i]
				off, k := comm.Chunk(engine.Elements(s), ranks, rank)
				if w.Copy != nil {
					if err := numtest.Equal(down(z.Copy), down(w.Copy)); err != nil {
						fail("%v: bf16 copy: %v", s, err)
					}
					// The master: the rank's chunk updated, the rest not.
					if err := numtest.Equal(down(z.Param.View(off, k)), down(w.Param.View(off, k))); err != nil {
						fail("%v: master chunk: %v", s, err)
					}
				} else if err := numtest.Equal(down(z.Param), down(w.Param)); err != nil {
					fail("%v: parameter: %v", s, err)
				}
				if err := numtest.Equal(down(zs[i].M), down(w.M.View(off, k))); err != nil {
					fail("%v: first moment: %v", s, err)
				}
				if err := numtest.Equal(down(zs[i].V), down(w.V.View(off, k))); err != nil {
					fail("%v: second moment: %v", s, err)
				}
			}
		})
	}
	wg.Wait()
}
