// Package cudatest finds engine/cuda's fake CUDA libraries
// (engine/cuda/testdata/fakecuda: eight fake GPUs that run the real kernels
// on the CPU, and an in-memory NCCL) for the tests of packages above the
// CUDA backend. The libraries are found through $MEMTRAIN_CUDA_LIB_DIR,
// which must be set before CUDA is first loaded in a process, so such
// tests run a child process in the environment Env returns.
package cudatest

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/engine/cuda"
)

var (
	once    sync.Once
	libDir  string
	skipWhy string // why the fake is unavailable
	failed  error
)

// LibDir returns the folder of the fake libraries, which engine/cuda's
// tests build with g++ and name (go test -run TestFakeCUDADir), or skips
// the test where they cannot be built.
func LibDir(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the fake CUDA libraries")
	}
	once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			skipWhy = "no go command to build engine/cuda's fake CUDA libraries with"
			return
		}
		cmd := exec.Command(goTool, "test", "-count=1", "-run", "^TestFakeCUDADir$", "-v", "github.com/memtrain/memtrain/engine/cuda")
		out, err := cmd.CombinedOutput()
		if m := regexp.MustCompile(`MEMTRAIN_CUDA_LIB_DIR=(\S+)`).FindSubmatch(out); err == nil && m != nil {
			libDir = string(m[1])
			return
		}
		if m := regexp.MustCompile(`--- SKIP: TestFakeCUDADir[^\n]*\n\s*(\S[^\n]*)`).FindSubmatch(out); err == nil && m != nil {
			skipWhy = string(m[1])
			return
		}
		failed = fmt.Errorf("go test -run TestFakeCUDADir ./engine/cuda: %v\n%s", err, out)
	})
	switch {
	case failed != nil:
		t.Fatal(failed)
	case skipWhy != "":
		t.Skip(skipWhy)
	}
	return libDir
}

// Env is the environment of a child process on the fake GPUs, with a
// kernel cache of its own (a real GPU must never load the fake's kernels)
// and exact float32 GEMMs, plus extra.
func Env(t testing.TB, extra ...string) []string {
	return append(os.Environ(), append([]string{
		cuda.LibDirEnv + "=" + LibDir(t),
		"MEMTRAIN_CUDA_CACHE=" + t.TempDir(),
		cuda.GemmEnv + "=" + cuda.GemmF32,
	}, extra...)...)
}
