//go:build (linux || darwin) && (amd64 || arm64) && !noopenblas

package gemm

import (
	"fmt"
	"math"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
)

// canLoadOpenBLAS reports whether OpenBLAS can succeed in this build.
const canLoadOpenBLAS = true

// CBLAS enumerations.
const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

// openBLAS calls OpenBLAS's cblas_sgemm through purego, without cgo.
type openBLAS struct {
	threads int
	lib     string // the library loaded
	core    string // the kernel family OpenBLAS chose, e.g. "SkylakeX"

	sgemm func(order, transA, transB, m, n, k int32, alpha float32, a *float32, lda int32,
		b *float32, ldb int32, beta float32, c *float32, ldc int32)
	setThreads func(n int32)
	getThreads func() int32
}

// OpenBLAS loads OpenBLAS at run time, without cgo, and returns a GEMM that
// calls its cblas_sgemm on threads threads (runtime.GOMAXPROCS(0) when
// threads ≤ 0). It tries $MEMTRAIN_OPENBLAS when set, else libopenblas.so.0,
// libopenblas.so and the usual install folders, and returns an error
// matching ErrOpenBLASUnavailable that lists the paths it tried when none
// loads.
//
// OpenBLAS's thread count is global to the process: Sgemm sets it to the
// Impl's Threads before calling OpenBLAS whenever it differs, so Impls with
// different thread counts must not run concurrently. OpenBLAS picks its
// kernels once, when loaded, from the CPU or $OPENBLAS_CORETYPE; a release
// older than the CPU falls back to slow generic ones (0.3.21 runs Sapphire
// Rapids as "Prescott", at a quarter of the Go path's speed). After each
// call its idle threads spin for up to 2^$OPENBLAS_THREAD_TIMEOUT cycles
// (2²⁸ by default, about 0.1 s), slowing any Go code that runs meanwhile.
// Its results may differ in the last bits from the Go path's and, with
// more than one thread, between thread counts.
func OpenBLAS(threads int) (Impl, error) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	h, lib, err := dlopenFirst(openBLASPaths())
	if err != nil {
		return nil, err
	}
	o := &openBLAS{threads: threads, lib: lib}
	for _, s := range []struct {
		name string
		fn   any
	}{
		{"cblas_sgemm", &o.sgemm},
		{"openblas_set_num_threads", &o.setThreads},
		{"openblas_get_num_threads", &o.getThreads},
	} {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("gemm: OpenBLAS %s: %w", lib, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	if sym, err := purego.Dlsym(h, "openblas_get_corename"); err == nil {
		var corename func() string
		purego.RegisterFunc(&corename, sym)
		o.core = strings.TrimSpace(corename())
	}
	o.setThreads(int32(threads))
	return o, nil
}

// dlopenFirst opens the first of paths that loads.
func dlopenFirst(paths []string) (uintptr, string, error) {
	e := &errNoOpenBLAS{}
	for _, p := range paths {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			return h, p, nil
		}
		e.tried = append(e.tried, p)
		e.errs = append(e.errs, err)
	}
	return 0, "", e
}

// Name returns "openblas".
func (o *openBLAS) Name() string { return "openblas" }

// Threads returns the thread count OpenBLAS is set to before each call.
func (o *openBLAS) Threads() int { return o.threads }

// Core returns the kernel family OpenBLAS chose for this CPU, such as
// "Haswell" or "SkylakeX", or "" if the library does not say.
func (o *openBLAS) Core() string { return o.core }

// Library returns the path of the library loaded.
func (o *openBLAS) Library() string { return o.lib }

// Sgemm computes C = alpha·op(A)·op(B) + beta·C with cblas_sgemm; see Impl.
func (o *openBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	for _, v := range [...]int{m, n, k, lda, ldb, ldc} {
		if v > math.MaxInt32 {
			panic(fmt.Sprintf("gemm: OpenBLAS takes 32-bit sizes; got m=%d n=%d k=%d lda=%d ldb=%d ldc=%d", m, n, k, lda, ldb, ldc))
		}
	}
	if beta == 0 {
		// Do not rely on OpenBLAS to overwrite NaNs rather than scale
		// them by zero.
		scale(m, n, 0, c, ldc)
	}
	ta, tb := int32(cblasNoTrans), int32(cblasNoTrans)
	if transA {
		ta = cblasTrans
	}
	if transB {
		tb = cblasTrans
	}
	if int(o.getThreads()) != o.threads {
		o.setThreads(int32(o.threads))
	}
	o.sgemm(cblasRowMajor, ta, tb, int32(m), int32(n), int32(k), alpha, &a[0], int32(lda), &b[0], int32(ldb), beta, &c[0], int32(ldc))
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
}
