//go:build !amd64 || purego

package gemm

// cpuKernels lists the micro-kernels this build runs: only the portable one.
var cpuKernels = []*microKernel{&genericKernel}

// cpuPairKernel is nil: this build has no pair kernel (GemmBF16 widens).
var cpuPairKernel *microKernel

// packColsFast reports false: this build has no faster packCols.
func packColsFast(panel []float32, w int, src []float32, ld, kc, n int, alpha float32) bool {
	return false
}

// packRowsFast reports false: this build has no faster packRows.
func packRowsFast(dst []float32, w int, src []float32, ld, kc, n int, alpha float32) bool {
	return false
}

// packRowsBF16Fast reports false: this build has no faster packRowsBF16.
func packRowsBF16Fast(dst []float32, w int, src []uint16, ld, kc, n int) bool {
	return false
}

// packColsBF16Fast reports false: this build has no faster packColsBF16.
func packColsBF16Fast(panel []float32, w int, src []uint16, ld, kc, n int) bool {
	return false
}

// pairsDownFast reports false: this build has no faster pairsDown.
func pairsDownFast(dst []uint32, w int, lo, hi []uint16, kc, q, n int) bool { return false }

// pairsAlongFast reports false: this build has no faster pairsAlong.
func pairsAlongFast(panel []uint32, w int, src []uint16, ld, n, kv int) bool { return false }
