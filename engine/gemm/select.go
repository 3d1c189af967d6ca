package gemm

import (
	"fmt"
	"strings"
)

// EnvBLAS names the environment variable that chooses the GEMM, read by
// the commands and passed to Select: "go", "openblas" or "auto".
const EnvBLAS = "MEMTRAIN_BLAS"

// Select returns the GEMM named by choice, running on threads threads
// (runtime.GOMAXPROCS(0) when threads ≤ 0):
//
//   - "go": the pure-Go path, New;
//   - "openblas": OpenBLAS loaded at run time, or the error saying why it
//     could not be loaded;
//   - "auto" or "": the pure-Go path.
//
// "auto" does not pick OpenBLAS even when it is installed. On the machine
// measured (2 cores of an AVX-512 Xeon, Debian's OpenBLAS 0.3.21; 1024³ and
// 2048³ on 1 and 2 threads), the Go path was 3.5–5× faster than OpenBLAS
// as it configures itself there (its generic "Prescott" kernels), 1.8–2×
// faster than its Haswell kernels and 1.0–1.1× as fast as its AVX-512
// (SkylakeX) ones. On 2 cores of an AMD EPYC (Zen 4, AVX-512) with
// OpenBLAS's Cooperlake kernels it was 1.1–1.3× as fast at 1024³ and
// 0.98–1.04× at 2048³. Besides, the Go path's results do not depend on the
// thread count, it does not keep threads spinning for 0.1 s after each
// call, and it needs no library. Choose "openblas" explicitly to use it.
// Case and surrounding space in choice are ignored.
func Select(choice string, threads int) (Impl, error) {
	switch strings.ToLower(strings.TrimSpace(choice)) {
	case "go", "auto", "":
		return New(threads), nil
	case "openblas":
		return OpenBLAS(threads)
	}
	return nil, fmt.Errorf("gemm: unknown %s %q: want go, openblas or auto", EnvBLAS, choice)
}
