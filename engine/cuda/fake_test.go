package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The fake CUDA libraries (testdata/fakecuda) run the real kernel sources
// on the CPU behind the real C API, so that the whole backend — bindings,
// worker thread, launches, cuBLAS mapping, NVRTC and its cache, NCCL —
// runs in tests on machines without a GPU. They are built with g++ once
// and kept in the user's cache, keyed by a hash of their sources.

var (
	fakeOnce sync.Once
	fakeDir  string
	fakeErr  error
)

// fakeCUDA returns the folder holding the fake libraries under their real
// names, building them if needed, or skips the test when it cannot.
func fakeCUDA(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("the fake CUDA libraries run on linux/amd64 only, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	fakeOnce.Do(func() { fakeDir, fakeErr = buildFakeCUDA() })
	if errors.Is(fakeErr, errNoCompiler) && os.Getenv("MEMTRAIN_REQUIRE_FAKECUDA") == "" {
		t.Skipf("fake CUDA libraries unavailable: %v", fakeErr)
	}
	if fakeErr != nil {
		// With a compiler there, a failed build is a broken kernel or
		// fake: a failure, not a reason to skip.
		t.Fatalf("fake CUDA libraries: %v", fakeErr)
	}
	return fakeDir
}

// errNoCompiler is the one reason to skip the emulated tests.
var errNoCompiler = errors.New("no g++ to build them with")

// fnv1a is the hash fakecuda.cpp compares NVRTC's input with.
func fnv1a(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

func buildFakeCUDA() (string, error) {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		return "", errNoCompiler
	}
	version, err := exec.Command(cxx, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("g++ --version: %v", err)
	}
	files := map[string][]byte{}
	for _, name := range []string{"fakecuda.cpp", "cuda_emu.h"} {
		data, err := os.ReadFile(filepath.Join("testdata", "fakecuda", name))
		if err != nil {
			return "", err
		}
		files[name] = data
	}
	src, headers := kernelSource()
	var gen strings.Builder
	gen.WriteString("// Written by fake_test.go: the kernel sources and their table.\n")
	names, _ := kernelFileNames()
	for _, n := range names {
		data, err := kernelFS.ReadFile(kernelSourceDir + "/" + n)
		if err != nil {
			return "", err
		}
		files["kernels/"+n] = data
		if strings.HasSuffix(n, ".cu") {
			fmt.Fprintf(&gen, "#include \"kernels/%s\"\n", n)
		}
	}
	var ks []string
	for k := range kernelSignatures {
		ks = append(ks, string(k))
	}
	sort.Strings(ks)
	gen.WriteString("static KernelEntry kernel_table[] = {\n")
	for _, k := range ks {
		fmt.Fprintf(&gen, "    kernel_entry(%q, %s),\n", k, k)
	}
	gen.WriteString("};\nstatic const size_t kernel_table_size = sizeof kernel_table / sizeof kernel_table[0];\n")
	files["kernels_gen.inc"] = []byte(gen.String())
	defines := []string{
		fmt.Sprintf("-DEXPECTED_SOURCE_HASH=%#xull", fnv1a(src)),
		fmt.Sprintf("-DEXPECTED_HEADER_HASH=%#xull", fnv1a(headers["common.cuh"])),
	}
	flags := append([]string{"-std=c++17", "-O1", "-fPIC", "-shared", "-pthread", "-ffp-contract=off",
		"-fvisibility=hidden", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function",
		"-I.", "-Ikernels", "-Wl,-soname,libmemtrain-fakecuda.so"}, defines...)

	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q\n", version, flags)
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s %d\n", k, len(files[k]))
		h.Write(files[k])
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "memtrain", "fakecuda", hex.EncodeToString(h.Sum(nil))[:16])
	lib := filepath.Join(dir, "libmemtrain-fakecuda.so")
	if _, err := os.Stat(lib); err == nil {
		return dir, nil
	}
	build, err := os.MkdirTemp(filepath.Dir(dir), "build-*")
	if err != nil {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return "", err
		}
		if build, err = os.MkdirTemp(filepath.Dir(dir), "build-*"); err != nil {
			return "", err
		}
	}
	defer os.RemoveAll(build)
	for name, data := range files {
		p := filepath.Join(build, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.Command(cxx, append(flags, "-o", "libmemtrain-fakecuda.so", "fakecuda.cpp")...)
	cmd.Dir = build
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("g++: %v\n%s", err, out)
	}
	for _, name := range []string{"libcuda.so.1", "libcublas.so.12", "libnvrtc.so.12", "libnccl.so.2"} {
		if err := os.Symlink("libmemtrain-fakecuda.so", filepath.Join(build, name)); err != nil {
			return "", err
		}
	}
	// Rename the whole folder into place, so a concurrent build or a
	// killed one never leaves a half-written library under the key.
	if err := os.Rename(build, dir); err != nil {
		if _, serr := os.Stat(lib); serr == nil {
			return dir, nil // another test binary got there first
		}
		return "", err
	}
	return dir, nil
}

// TestFakeCUDADir names the fake libraries' folder (go test -v), for
// running the GPU tests or scripts/gpu-check.sh on them by hand:
// MEMTRAIN_CUDA_LIB_DIR=<folder>.
func TestFakeCUDADir(t *testing.T) {
	t.Logf("MEMTRAIN_CUDA_LIB_DIR=%s", fakeCUDA(t))
}

// newFake returns a backend on fake device dev, closed when the test ends.
func newFake(t testing.TB, dev int, gemm string) *Backend {
	t.Helper()
	dir := fakeCUDA(t)
	// Poisoned: an Empty tensor read before it is written shows as NaN.
	b, err := New(Options{Device: dev, GEMM: gemm, LibDir: dir, CacheDir: fakeCacheDir(t), Poison: true})
	if err != nil {
		// Not Fatal: the conformance suite calls this from its subtests.
		panic(fmt.Sprintf("New on the fake libraries: %v", err))
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

var (
	fakeCacheOnce sync.Once
	fakeCache     string
)

// fakeCacheDir is one kernel cache folder for the whole test binary.
func fakeCacheDir(t testing.TB) string {
	fakeCacheOnce.Do(func() {
		d, err := os.MkdirTemp("", "memtrain-cuda-cache-*")
		if err != nil {
			t.Fatal(err)
		}
		fakeCache = d
	})
	return fakeCache
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeCache != "" {
		os.RemoveAll(fakeCache)
	}
	os.Exit(code)
}
