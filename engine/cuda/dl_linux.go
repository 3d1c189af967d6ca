//go:build linux && (amd64 || arm64)

package cuda

import "github.com/ebitengine/purego"

// canLoad reports whether this build can load the CUDA libraries.
const canLoad = true

// dlopen loads a shared library, resolving its symbols now and making
// them global, so that libraries loaded later (cuBLAS loading cuBLASLt,
// NVRTC its builtins) find the copies loaded here.
func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// dlsym finds a symbol of a loaded library.
func dlsym(handle uintptr, name string) (uintptr, error) {
	return purego.Dlsym(handle, name)
}

// bind makes fn, a pointer to a Go function variable, call the C function
// at sym.
func bind(fn any, sym uintptr) { purego.RegisterFunc(fn, sym) }
