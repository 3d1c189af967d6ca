package cuda

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/internal/numtest"
)

// These tests check the emulator's warp collectives (kernels/warp.cuh,
// emulated in testdata/fakecuda) against the layouts as the PTX ISA states
// them, written out again here: a lane's fragment registers for
// mma.m16n8k16 with bf16 operands ("Matrix Fragments for mma.m16n8k16")
// and the registers ldmatrix gives each lane.

// warpFake binds the fake library's test entry points.
type warpFake struct {
	ldmatrix   func(n, trans int32, mem *uint16, rows *int32, out *uint32) int32
	mma        func(a, b *uint32, c, d *float32) int32
	misuse     func(which int32) int32
	wait       func(p uintptr, want int32) int32
	setPermute func(on int32)
	mmaCount   func() int64
	errString  func(r int32, s **byte) int32
}

func newWarpFake(t *testing.T) *warpFake {
	t.Helper()
	h, err := dlopen(filepath.Join(fakeCUDA(t), "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	f := &warpFake{}
	for name, fn := range map[string]any{
		"fakecuda_test_ldmatrix":     &f.ldmatrix,
		"fakecuda_test_mma":          &f.mma,
		"fakecuda_test_misuse":       &f.misuse,
		"fakecuda_test_counter_wait": &f.wait,
		"fakecuda_set_mma_permuted":  &f.setPermute,
		"fakecuda_mma_count":         &f.mmaCount,
		"cuGetErrorString":           &f.errString,
	} {
		sym, err := dlsym(h, name)
		if err != nil {
			t.Fatal(err)
		}
		bind(fn, sym)
	}
	return f
}

// why is the fake's explanation of its last failure.
func (f *warpFake) why(r int32) string {
	var s *byte
	f.errString(r, &s)
	return cString(s)
}

func randomBF16(r *rand.Rand) uint16 { return checkpoints.Float32ToBF16(float32(r.NormFloat64())) }

func bf16Value(h uint16) float64 { return float64(checkpoints.BF16ToFloat32(h)) }

// TestLdmatrixEmulated runs ldmatrix .x1, .x2 and .x4, plain and
// transposed, on random matrices whose rows the lanes pick at random, and
// checks every lane's registers: lanes 8i..8i+7 address the rows of matrix
// i, and lane l receives row l/4, elements 2(l%4) and 2(l%4)+1 (.trans:
// column l/4, rows 2(l%4) and 2(l%4)+1), the lower in the low half.
func TestLdmatrixEmulated(t *testing.T) {
	f := newWarpFake(t)
	r := rand.New(rand.NewPCG(11, 3))
	for _, n := range []int{1, 2, 4} {
		for _, trans := range []bool{false, true} {
			mem := make([]uint16, 64*8)
			for i := range mem {
				mem[i] = randomBF16(r)
			}
			rows := make([]int32, 32)
			for i := range rows {
				rows[i] = int32(r.IntN(64))
			}
			out := make([]uint32, 32*4)
			tr := int32(0)
			if trans {
				tr = 1
			}
			if rc := f.ldmatrix(int32(n), tr, &mem[0], &rows[0], &out[0]); rc != 0 {
				t.Fatalf("ldmatrix x%d trans %v: %s", n, trans, f.why(rc))
			}
			at := func(m, row, col int) uint32 { return uint32(mem[int(rows[8*m+row])*8+col]) }
			want := make([]uint32, 32*4)
			for l := range 32 {
				for m := range n {
					if trans {
						want[4*l+m] = at(m, 2*(l%4), l/4) | at(m, 2*(l%4)+1, l/4)<<16
					} else {
						want[4*l+m] = at(m, l/4, 2*(l%4)) | at(m, l/4, 2*(l%4)+1)<<16
					}
				}
			}
			if !slices.Equal(out, want) {
				t.Errorf("ldmatrix x%d trans %v: lanes' registers\n got %x\nwant %x", n, trans, out, want)
			}
		}
	}
}

// mmaOperands are random A (16×16) and B (16×8) in bf16, C (16×8) in
// float32, and each lane's fragments of them by the PTX layout.
type mmaOperands struct {
	A    [16][16]uint16
	B    [16][8]uint16
	C    [16][8]float32
	a, b []uint32
	c    []float32
}

func newMMAOperands(r *rand.Rand) *mmaOperands {
	o := &mmaOperands{a: make([]uint32, 32*4), b: make([]uint32, 32*2), c: make([]float32, 32*4)}
	for i := range 16 {
		for k := range 16 {
			o.A[i][k] = randomBF16(r)
		}
		for j := range 8 {
			o.B[i][j] = randomBF16(r)
			o.C[i][j] = float32(r.NormFloat64())
		}
	}
	pack := func(lo, hi uint16) uint32 { return uint32(lo) | uint32(hi)<<16 }
	for l := range 32 {
		g, c := l/4, 2*(l%4)
		o.a[4*l+0] = pack(o.A[g][c], o.A[g][c+1])
		o.a[4*l+1] = pack(o.A[g+8][c], o.A[g+8][c+1])
		o.a[4*l+2] = pack(o.A[g][c+8], o.A[g][c+9])
		o.a[4*l+3] = pack(o.A[g+8][c+8], o.A[g+8][c+9])
		o.b[2*l+0] = pack(o.B[c][g], o.B[c+1][g])
		o.b[2*l+1] = pack(o.B[c+8][g], o.B[c+9][g])
		o.c[4*l+0], o.c[4*l+1] = o.C[g][c], o.C[g][c+1]
		o.c[4*l+2], o.c[4*l+3] = o.C[g+8][c], o.C[g+8][c+1]
	}
	return o
}

// want is D = A·B + C in float64, in the lanes' order of D's fragments,
// with each element's bound: 17 float32 additions of terms whose
// magnitudes sum to Σ|a·b| + |c| (the products are exact) may each round
// by 2⁻²⁴ of the running sum, so |Δ| ≤ 17·2⁻²⁴·(Σ|a·b| + |c|).
func (o *mmaOperands) want() (d, bound []float64) {
	d, bound = make([]float64, 32*4), make([]float64, 32*4)
	for l := range 32 {
		g, c := l/4, 2*(l%4)
		for i := range 4 {
			row, col := g+8*(i/2), c+i%2
			s, abs := float64(o.C[row][col]), math.Abs(float64(o.C[row][col]))
			for k := range 16 {
				p := bf16Value(o.A[row][k]) * bf16Value(o.B[k][col])
				s += p
				abs += math.Abs(p)
			}
			d[4*l+i], bound[4*l+i] = s, 17*math.Pow(2, -24)*abs
		}
	}
	return d, bound
}

// TestMMAEmulated runs mma.m16n8k16 on random operands given in the PTX
// fragment layout and checks D = A·B + C within float32 summation; with
// the emulator's layout permuted (A's row halves swapped) the same check
// must fail, so the test sees the layout.
func TestMMAEmulated(t *testing.T) {
	f := newWarpFake(t)
	r := rand.New(rand.NewPCG(5, 8))
	for trial := range 8 {
		o := newMMAOperands(r)
		want, bound := o.want()
		d := make([]float32, 32*4)
		if rc := f.mma(&o.a[0], &o.b[0], &o.c[0], &d[0]); rc != 0 {
			t.Fatalf("mma: %s", f.why(rc))
		}
		if err := numtest.CloseBounds(d, want, bound); err != nil {
			t.Errorf("trial %d: mma D against A·B + C: %v", trial, err)
		}
	}
	f.setPermute(1)
	defer f.setPermute(0)
	o := newMMAOperands(r)
	want, bound := o.want()
	d := make([]float32, 32*4)
	if rc := f.mma(&o.a[0], &o.b[0], &o.c[0], &d[0]); rc != 0 {
		t.Fatalf("mma (permuted): %s", f.why(rc))
	}
	if err := numtest.CloseBounds(d, want, bound); err == nil {
		t.Error("mma with A's row halves swapped still matches A·B + C")
	}
}

// TestWarpMisuseEmulated checks that the emulator refuses misuse of the
// collectives and asynchronous copies, naming it.
func TestWarpMisuseEmulated(t *testing.T) {
	f := newWarpFake(t)
	for i, want := range []string{
		"mma.sync after lane 31 returned",
		"meet at different collectives",
		"cp.async.wait_group 1 with 0 groups in flight",
		"copies not committed",
		"returned with cp.async copies never waited for",
		"ldmatrix of different shapes",
	} {
		rc := f.misuse(int32(i))
		if rc == 0 {
			t.Errorf("misuse %d (%s) ran", i, want)
			continue
		}
		if why := f.why(rc); !strings.Contains(why, want) {
			t.Errorf("misuse %d: %q, want it to say %q", i, why, want)
		}
	}
}

// TestCounterWaitEmulated: a block's wait for a counter that earlier
// blocks raised passes; one for a value no earlier block reached fails at
// once (the emulator runs blocks in order: on a GPU it would spin for
// ever), naming the values.
func TestCounterWaitEmulated(t *testing.T) {
	f := newWarpFake(t)
	b := newFake(t, 0, GemmF32)
	c := b.Alloc(engine.I32, 1)
	defer b.Free(c)
	b.Upload(c, []float32{3})
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	p := uintptr(b.viewOf("test", c).ptr)
	if rc := f.wait(p, 3); rc != 0 {
		t.Errorf("wait for 3 with the counter at 3: %s", f.why(rc))
	}
	rc := f.wait(p, 4)
	if rc == 0 {
		t.Fatal("wait for 4 with the counter at 3 returned")
	}
	if why := f.why(rc); !strings.Contains(why, "counter at 3 to reach 4") {
		t.Errorf("wait for 4 with the counter at 3: %q", why)
	}
}
