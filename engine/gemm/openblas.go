package gemm

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// openBLASEnv names the environment variable that, when set, is the only
// OpenBLAS library OpenBLAS tries to load.
const openBLASEnv = "MEMTRAIN_OPENBLAS"

// openBLASPaths lists the libraries OpenBLAS tries, in order: the value of
// $MEMTRAIN_OPENBLAS alone when it is set, else the names the dynamic
// loader resolves on its search path and the places Linux distributions
// and Homebrew install OpenBLAS.
func openBLASPaths() []string {
	if p := os.Getenv(openBLASEnv); p != "" {
		return []string{p}
	}
	if runtime.GOOS == "darwin" {
		return []string{
			"libopenblas.dylib",
			"/opt/homebrew/opt/openblas/lib/libopenblas.dylib",
			"/usr/local/opt/openblas/lib/libopenblas.dylib",
		}
	}
	paths := []string{"libopenblas.so.0", "libopenblas.so"}
	multiarch := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	if multiarch != "" {
		// Debian and Ubuntu install each threading variant in its own
		// folder and point libopenblas.so.0 at one through alternatives.
		for _, v := range []string{"openblas-pthread", "openblas-openmp", "openblas-serial"} {
			paths = append(paths, "/usr/lib/"+multiarch+"/"+v+"/libopenblas.so.0")
		}
	}
	return append(paths, "/usr/lib64/libopenblas.so.0", "/usr/local/lib/libopenblas.so.0", "/opt/OpenBLAS/lib/libopenblas.so.0")
}

// errNoOpenBLAS reports that no OpenBLAS library could be loaded.
type errNoOpenBLAS struct {
	tried []string
	errs  []error
	// unsupported, when set, says why this build cannot load libraries
	// at all.
	unsupported string
}

func (e *errNoOpenBLAS) Error() string {
	if e.unsupported != "" {
		return "gemm: this build cannot load OpenBLAS: " + e.unsupported
	}
	var b strings.Builder
	b.WriteString("gemm: OpenBLAS not loaded (install libopenblas0-pthread or set $" + openBLASEnv + " to the library); tried ")
	for i, p := range e.tried {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%v)", p, e.errs[i])
	}
	return b.String()
}

// ErrOpenBLASUnavailable is matched, with errors.Is, by the error OpenBLAS
// returns when no library could be loaded.
var ErrOpenBLASUnavailable = errors.New("OpenBLAS unavailable")

func (e *errNoOpenBLAS) Is(target error) bool { return target == ErrOpenBLASUnavailable }
