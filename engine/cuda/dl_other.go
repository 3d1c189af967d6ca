//go:build !(linux && (amd64 || arm64))

package cuda

import (
	"fmt"
	"runtime"
)

// canLoad reports whether this build can load the CUDA libraries: not on
// this platform.
const canLoad = false

func dlopen(path string) (uintptr, error) {
	return 0, fmt.Errorf("cuda: loading libraries is not supported on %s/%s", runtime.GOOS, runtime.GOARCH)
}

func dlsym(handle uintptr, name string) (uintptr, error) {
	return 0, fmt.Errorf("cuda: loading libraries is not supported on %s/%s", runtime.GOOS, runtime.GOARCH)
}

func bind(fn any, sym uintptr) { panic("cuda: loading libraries is not supported on " + runtime.GOOS) }
