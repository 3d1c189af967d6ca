package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/internal/numtest"
)

// launchedKernels reads the package's Go files for the constants of type
// kernel: the names launch can be called with.
func launchedKernels(t *testing.T) map[kernel]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	names := map[kernel]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if id, ok := spec.Type.(*ast.Ident); !ok || id.Name != "kernel" {
				return true
			}
			for _, v := range spec.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s: a kernel constant that is not a string literal", fset.Position(v.Pos()))
				}
				s, _ := strconv.Unquote(lit.Value)
				names[kernel(s)] = true
			}
			return true
		})
	}
	return names
}

// Every kernel the Go code can launch is an extern "C" __global__ function
// of the sources, and every such function is launched by some constant.
func TestKernelNamesExist(t *testing.T) {
	src, _ := kernelSource()
	defined := map[kernel]bool{}
	for _, m := range globalRE.FindAllStringSubmatch(src, -1) {
		defined[kernel(m[1])] = true
	}
	launched := launchedKernels(t)
	if len(launched) < 20 {
		t.Fatalf("found only %d kernel constants: %v", len(launched), launched)
	}
	for k := range launched {
		if !defined[k] {
			t.Errorf("kernel %q is launched but not defined as extern \"C\" __global__ in kernels/", k)
		}
		if _, ok := kernelSignatures[k]; !ok {
			t.Errorf("kernel %q has no parsed signature", k)
		}
	}
	for k := range defined {
		if !launched[k] {
			t.Errorf("kernel %q is defined but no constant launches it", k)
		}
	}
}

func TestParseKernels(t *testing.T) {
	sigs, err := parseKernels(`
extern "C" __global__ void f(void* out, int dt, const void* x,
                             i64 n, float alpha, const int* ids, long long m) {}
extern "C" __global__ void g() {}
extern "C" __global__ void __launch_bounds__(128)
    lb(float* x) {}
__device__ void not_a_kernel(int x) {}`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[kernel][]argKind{
		"f":  {argPtr, argInt32, argPtr, argInt64, argFloat32, argPtr, argInt64},
		"g":  nil,
		"lb": {argPtr},
	}
	if !reflect.DeepEqual(sigs, want) {
		t.Errorf("parsed %v, want %v", sigs, want)
	}
	for _, bad := range []string{
		`extern "C" __global__ void h(double x) {}`,
		`extern "C" __global__ void h(int) {}`,
		`extern "C" __global__ void h(int x) {} extern "C" __global__ void h(int y) {}`,
	} {
		if _, err := parseKernels(bad); err == nil {
			t.Errorf("parsed %q without error", bad)
		}
	}
	// The real sources: a known signature.
	if got := kernelSignatures[kAxpy]; !reflect.DeepEqual(got, []argKind{argPtr, argInt32, argFloat32, argPtr, argInt32, argInt64}) {
		t.Errorf("axpy's signature parsed as %v", got)
	}
}

// The constants the Go code shares with the sources agree.
func TestSharedConstants(t *testing.T) {
	src, headers := kernelSource()
	all := src + headers["common.cuh"]
	for name, want := range map[string]int{
		"DT_F32":          int(engine.F32),
		"DT_BF16":         int(engine.BF16),
		"DT_I8":           int(engine.I8),
		"INT8_BLOCK":      engine.Int8Block,
		"SUMSQ_BLOCK":     sumSquaresBlock,
		"VEC":             vecElems,
		"SUMSQ_FIELDS":    sumSquaresFields,
		"ARGMAX_THREADS":  argmaxThreads,
		"CE_THREADS":      crossEntropyThreads,
		"SUMSQ_THREADS":   sumSquaresThreads,
		"RMSNORM_THREADS": rmsnormThreads,
		"FA_THREADS":      faThreads,
		"WIDEN_THREADS":   widenThreads,
		"FA_ROWS":         faRows,
		"FA_ACC":          faAccumulators,
		"ADAMW_THREADS":   adamWThreads,
		"ADAMW_CHUNK":     adamWChunk,
		"ADAMW_FIELDS":    adamWFields,
	} {
		m := regexp.MustCompile(`#define ` + name + ` (\d+)`).FindStringSubmatch(all)
		if m == nil {
			t.Errorf("no #define %s in the sources", name)
			continue
		}
		if got, _ := strconv.Atoi(m[1]); got != want {
			t.Errorf("#define %s %d, the Go code uses %d", name, got, want)
		}
	}
	if !strings.Contains(src, "// ---- attention.cu\n") || strings.Contains(src, "// ---- common.cuh") {
		t.Errorf("the program does not hold the .cu files (and only them) in order")
	}
}

// Launch arguments are packed as cuLaunchKernel reads them: a pointer per
// parameter, each to the parameter's bytes.
func TestPackArgs(t *testing.T) {
	sig := []argKind{argPtr, argInt32, argInt64, argFloat32, argInt32}
	a, err := packArgs("k", sig, []any{devptr(0x7f0012345678), int32(-3), int64(1) << 40, float32(1.5), int32(7)})
	if err != nil {
		t.Fatal(err)
	}
	ptrs := unsafe.Slice((*unsafe.Pointer)(a.params()), len(sig))
	if got := *(*uint64)(ptrs[0]); got != 0x7f0012345678 {
		t.Errorf("pointer argument reads %#x", got)
	}
	if got := *(*int32)(ptrs[1]); got != -3 {
		t.Errorf("int argument reads %d", got)
	}
	if got := *(*int64)(ptrs[2]); got != 1<<40 {
		t.Errorf("i64 argument reads %d", got)
	}
	if got := *(*float32)(ptrs[3]); got != 1.5 {
		t.Errorf("float argument reads %g", got)
	}
	if got := *(*int32)(ptrs[4]); got != 7 {
		t.Errorf("last int argument reads %d", got)
	}
	for i := range ptrs {
		if ptrs[i] != unsafe.Pointer(&a.slots[i]) {
			t.Errorf("pointer %d does not point at slot %d", i, i)
		}
	}
	// A negative int32 occupies its slot's first four bytes only.
	if a.slots[1] != uint64(uint32(0xfffffffd)) {
		t.Errorf("slot of int32(-3) = %#x", a.slots[1])
	}
	if a, err := packArgs("none", nil, nil); err != nil || a.params() != nil {
		t.Errorf("no arguments: %v, %v", a.params(), err)
	}

	for _, c := range []struct {
		args []any
		want string
	}{
		{[]any{devptr(1), int32(1), int64(1), float32(1)}, "takes 5 arguments, launched with 4"},
		{[]any{devptr(1), int64(1), int64(1), float32(1), int32(1)}, "argument 1 is i64, the kernel takes int"},
		{[]any{devptr(1), int32(1), int32(1), float32(1), int32(1)}, "argument 2 is int, the kernel takes i64"},
		{[]any{devptr(1), 1, int64(1), float32(1), int32(1)}, "argument 1 is a int"},
		{[]any{devptr(1), int32(1), int64(1), 1.5, int32(1)}, "argument 3 is a float64"},
	} {
		if _, err := packArgs("k", sig, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("packArgs(%v): %v, want %q", c.args, err, c.want)
		}
	}
}

func TestLaunchShapes(t *testing.T) {
	for _, c := range []struct{ n, limit, want int }{{1, 256, 32}, {33, 256, 64}, {128, 256, 128}, {300, 256, 256}, {5003, 1024, 1024}} {
		if got := rowThreads(c.n, c.limit); got != block1(c.want) {
			t.Errorf("rowThreads(%d, %d) = %v, want %d", c.n, c.limit, got, c.want)
		}
	}
	if g := elementGrid(0); g.x != 1 {
		t.Errorf("elementGrid(0) = %v", g)
	}
	if g := elementGrid(70001); g.x != 274 {
		t.Errorf("elementGrid(70001) = %v", g)
	}
	if g := elementGrid(1 << 40); g.x != maxGridX {
		t.Errorf("elementGrid(2^40) = %v", g)
	}
}

func TestCacheKey(t *testing.T) {
	src, headers := kernelSource()
	t90 := kernelTarget{arch: 90, cubin: true}
	opts := nvrtcOptions(t90, true)
	base := cacheKey("12.4", t90, opts, src, headers)
	if len(base) != 32 || base != cacheKey("12.4", t90, opts, src, headers) {
		t.Fatalf("key %q is not a stable 32-digit hash", base)
	}
	h2 := map[string]string{"common.cuh": headers["common.cuh"] + " "}
	for what, k := range map[string]string{
		"NVRTC version": cacheKey("12.5", t90, opts, src, headers),
		"target":        cacheKey("12.4", kernelTarget{arch: 90}, opts, src, headers),
		"architecture":  cacheKey("12.4", kernelTarget{arch: 80, cubin: true}, opts, src, headers),
		"options":       cacheKey("12.4", t90, append(slices.Clone(opts), "-G"), src, headers),
		"source":        cacheKey("12.4", t90, opts, src+"\n", headers),
		"header":        cacheKey("12.4", t90, opts, src, h2),
	} {
		if k == base {
			t.Errorf("the key does not change with the %s", what)
		}
	}
	if ext := t90.ext(); ext != ".cubin" || (kernelTarget{arch: 90}).ext() != ".ptx" {
		t.Errorf("extensions %q", ext)
	}
}

func TestKernelCacheDir(t *testing.T) {
	if d, _ := kernelCacheDir("/x"); d != "/x" {
		t.Errorf("explicit dir: %q", d)
	}
	t.Setenv(CacheEnv, "/from/env")
	if d, _ := kernelCacheDir(""); d != "/from/env" {
		t.Errorf("$%s: %q", CacheEnv, d)
	}
	t.Setenv(CacheEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if d, err := kernelCacheDir(""); err == nil && d != filepath.Join("/xdg", "memtrain", "cuda") {
		t.Errorf("default: %q", d)
	}
}

func TestChooseTarget(t *testing.T) {
	archs := []int{50, 60, 70, 75, 80, 86, 89, 90}
	for _, c := range []struct {
		cc       int
		archs    []int
		cubin    bool
		want     string
		wantFail bool
	}{
		{90, archs, true, "sm_90", false},
		{86, archs, true, "sm_86", false},
		{100, archs, true, "compute_90", false}, // a GPU newer than NVRTC: PTX the driver compiles
		{87, archs, true, "compute_86", false},
		{90, archs, false, "compute_90", false}, // NVRTC without CUBIN output
		{90, nil, true, "sm_90", false},         // NVRTC that cannot list its architectures
		{35, archs, true, "", true},             // a GPU older than NVRTC supports
	} {
		got, err := chooseTarget(c.cc, c.archs, c.cubin)
		if (err != nil) != c.wantFail || (err == nil && got.String() != c.want) {
			t.Errorf("chooseTarget(%d, %v, %v) = %v, %v; want %s", c.cc, c.archs, c.cubin, got, err, c.want)
		}
	}
}

func TestSegmentsByID(t *testing.T) {
	ids := []int32{5, 2, 5, 0, 2, 5, 9}
	order, seg := segmentsByID(ids)
	if want := []int32{3, 1, 4, 0, 2, 5, 6}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if want := []int32{0, 1, 3, 6, 7}; !slices.Equal(seg, want) {
		t.Errorf("segments %v, want %v", seg, want)
	}
	if order, seg := segmentsByID(nil); len(order) != 0 || !slices.Equal(seg, []int32{0}) {
		t.Errorf("no ids: %v %v", order, seg)
	}
}

// colMajorGemm is cuBLAS's definition of a strided batched GEMM, on host
// slices, with elements addressed as cuBLAS addresses them.
func colMajorGemm(c cublasArgs, alpha, beta float64, A, B, C []float64, offA, offB, offC int) {
	for b := 0; b < int(c.batch); b++ {
		for j := 0; j < int(c.n); j++ {
			for i := 0; i < int(c.m); i++ {
				var acc float64
				for l := 0; l < int(c.k); l++ {
					ai := i + l*int(c.lda)
					if c.transA == cublasOpT {
						ai = l + i*int(c.lda)
					}
					bi := l + j*int(c.ldb)
					if c.transB == cublasOpT {
						bi = j + l*int(c.ldb)
					}
					acc += A[offA+b*int(c.strideA)+ai] * B[offB+b*int(c.strideB)+bi]
				}
				ci := offC + b*int(c.strideC) + i + j*int(c.ldc)
				C[ci] = alpha*acc + beta*C[ci]
			}
		}
	}
}

// The row-major call maps onto cuBLAS's column-major one (operands
// swapped, M and N swapped, flags and leading dimensions kept) so that
// cuBLAS's own definition computes the row-major product.
func TestCublasArgsOf(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 40; trial++ {
		g := gemmCall{transA: r.IntN(2) == 1, transB: r.IntN(2) == 1,
			m: 1 + r.IntN(6), n: 1 + r.IntN(6), k: 1 + r.IntN(6), batch: 1 + r.IntN(3),
			alpha: 0.5, beta: 0.25, abType: engine.F32, cType: engine.F32}
		ar, ac := g.m, g.k
		if g.transA {
			ar, ac = g.k, g.m
		}
		br, bc := g.k, g.n
		if g.transB {
			br, bc = g.n, g.k
		}
		g.lda, g.ldb, g.ldc = ac+r.IntN(3), bc+r.IntN(3), g.n+r.IntN(3)
		g.strideA, g.strideB, g.strideC = ar*g.lda+r.IntN(4), br*g.ldb+r.IntN(4), g.m*g.ldc+r.IntN(4)
		fill := func(n int) []float64 {
			x := make([]float64, n)
			for i := range x {
				x[i] = r.NormFloat64()
			}
			return x
		}
		A, B, C := fill(g.batch*g.strideA), fill(g.batch*g.strideB), fill(g.batch*g.strideC)
		want := slices.Clone(C)
		for b := 0; b < g.batch; b++ {
			for i := 0; i < g.m; i++ {
				for j := 0; j < g.n; j++ {
					var acc float64
					for l := 0; l < g.k; l++ {
						ai, bi := b*g.strideA+i*g.lda+l, b*g.strideB+l*g.ldb+j
						if g.transA {
							ai = b*g.strideA + l*g.lda + i
						}
						if g.transB {
							bi = b*g.strideB + j*g.ldb + l
						}
						a, bv := A[ai], B[bi]
						acc += a * bv
					}
					at := b*g.strideC + i*g.ldc + j
					want[at] = 0.5*acc + 0.25*C[at]
				}
			}
		}
		c := cublasArgsOf(g, GemmF32)
		// cuBLAS's first operand is our B, its second our A.
		colMajorGemm(c, 0.5, 0.25, B, A, C, 0, 0, 0)
		if err := numtest.Close(C, want, numtest.Tol{Abs: 1e-12}); err != nil {
			t.Fatalf("trial %d (%+v): %v", trial, g, err)
		}
		if c.compute != cublasCompute32F || c.aType != cudaR32F || c.cType != cudaR32F {
			t.Errorf("types %+v", c)
		}
	}
	g := gemmCall{m: 1, n: 1, k: 1, batch: 1, abType: engine.F32, cType: engine.F32}
	if c := cublasArgsOf(g, GemmBF16); c.compute != cublasCompute32FFast16BF {
		t.Errorf("bf16 mode computes with %d", c.compute)
	}
	if c := cublasArgsOf(g, GemmTF32); c.compute != cublasCompute32FFastTF32 {
		t.Errorf("tf32 mode computes with %d", c.compute)
	}
	g.abType, g.cType = engine.BF16, engine.F32
	if c := cublasArgsOf(g, GemmTF32); c.compute != cublasCompute32F || c.aType != cudaR16BF || c.bType != cudaR16BF || c.cType != cudaR32F {
		t.Errorf("bf16 operands: %+v", c)
	}
}

// The kernel sources are plain files in the package, as embedded.
func TestKernelFilesEmbedded(t *testing.T) {
	names, err := kernelFileNames()
	if err != nil {
		t.Fatal(err)
	}
	disk, _ := filepath.Glob(filepath.Join(kernelSourceDir, "*"))
	if len(disk) != len(names) {
		t.Errorf("%d files embedded, %d on disk", len(names), len(disk))
	}
	for _, n := range names {
		want, _ := os.ReadFile(filepath.Join(kernelSourceDir, n))
		got, _ := kernelFS.ReadFile(kernelSourceDir + "/" + n)
		if string(want) != string(got) {
			t.Errorf("%s differs from its embedded copy", n)
		}
	}
}

// Every kernel of the sources has launch bounds, read through the
// #defines; a kernel without them, or bounds naming an unknown macro,
// is an error.
func TestParseBounds(t *testing.T) {
	for k := range kernelSignatures {
		if kernelBounds[k] < 32 || kernelBounds[k] > 1024 {
			t.Errorf("kernel %s: launch bounds %d", k, kernelBounds[k])
		}
	}
	if kernelBounds[kCrossEntropy] != crossEntropyThreads || kernelBounds[kAdd] != elementThreads {
		t.Errorf("bounds of cross_entropy %d and add %d, want %d and %d", kernelBounds[kCrossEntropy], kernelBounds[kAdd], crossEntropyThreads, elementThreads)
	}
	for _, c := range []struct {
		name, src string
		want      int
		err       string
	}{
		{"number", `extern "C" __global__ void __launch_bounds__(128) k(int n) {}`, 128, ""},
		{"define", "#define T 64\n" + `extern "C" __global__ void __launch_bounds__(T) k(int n) {}`, 64, ""},
		{"none", `extern "C" __global__ void k(int n) {}`, 0, "no __launch_bounds__"},
		{"unknown macro", `extern "C" __global__ void __launch_bounds__(U) k(int n) {}`, 0, "neither a number nor a #define"},
	} {
		sigs, err := parseKernels(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, err := parseBounds(c.src, nil, sigs)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		case c.err == "" && (err != nil || b["k"] != c.want):
			t.Errorf("%s: bounds %v (%v), want %d", c.name, b, err, c.want)
		}
	}
}

// The angle table is indexed by position when the positions are
// non-negative and the table by position is no longer than one a token;
// by token otherwise.
func TestRoPETableRows(t *testing.T) {
	for _, c := range []struct {
		pos   []int32
		rows  int
		byPos bool
	}{
		{[]int32{0, 1, 2, 0, 1, 2}, 3, true}, // a batch of two sequences
		{[]int32{5}, 1, false},               // decoding at position 5
		{[]int32{0}, 1, true},
		{[]int32{3, 2, 1, 0}, 4, true},
		{[]int32{0, 1, 4}, 3, false}, // the table by position would be longer
		{[]int32{0, -1, 1}, 3, false},
	} {
		rows, byPos := ropeTableRows(c.pos)
		if rows != c.rows || byPos != c.byPos {
			t.Errorf("ropeTableRows(%v) = %d, %v; want %d, %v", c.pos, rows, byPos, c.rows, c.byPos)
		}
	}
}
