//go:build !((linux || darwin) && (amd64 || arm64)) || noopenblas

package gemm

import "runtime"

// canLoadOpenBLAS reports whether OpenBLAS can succeed in this build.
const canLoadOpenBLAS = false

// OpenBLAS would load OpenBLAS at run time, but this build cannot: either
// the platform is not one where purego loads libraries without cgo
// (linux and darwin on amd64 and arm64), or the binary was built with
// -tags noopenblas, which keeps it free of the C library that loading
// needs. It returns an error matching ErrOpenBLASUnavailable.
func OpenBLAS(threads int) (Impl, error) {
	return nil, &errNoOpenBLAS{
		unsupported: "loading libraries without cgo needs linux or darwin on amd64 or arm64, without -tags noopenblas; this is " +
			runtime.GOOS + "/" + runtime.GOARCH,
	}
}
