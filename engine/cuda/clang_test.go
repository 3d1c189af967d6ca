package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestKernelsCompileWithClang compiles the kernels to PTX with clang's
// CUDA front end, when a clang is installed: a check of what the
// emulator's C++ compiler cannot see — execution spaces (__device__ code
// calling host functions), shared memory, CUDA's own built-ins — on
// machines without NVRTC. NVRTC itself compiles them on a GPU machine.
func TestKernelsCompileWithClang(t *testing.T) {
	clang := ""
	for _, name := range []string{"clang++", "clang++-19", "clang++-18", "clang++-17", "clang++-16", "clang++-15", "clang++-14"} {
		if p, err := exec.LookPath(name); err == nil {
			clang = p
			break
		}
	}
	if clang == "" {
		t.Skip("no clang++ to compile the kernels with (Debian: apt-get install clang)")
	}
	dir := t.TempDir()
	prelude, err := os.ReadFile(filepath.Join("testdata", "clang", "nvrtc_prelude.cuh"))
	if err != nil {
		t.Fatal(err)
	}
	src, headers := kernelSource()
	for name, data := range headers {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	all := filepath.Join(dir, "all.cu")
	if err := os.WriteFile(all, append(append(prelude, '\n'), src...), 0o644); err != nil {
		t.Fatal(err)
	}
	ptx := filepath.Join(dir, "all.ptx")
	cmd := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80", "-nocudainc", "-nocudalib",
		"-Xclang", "-target-feature", "-Xclang", "+ptx70", "-Wall", "-Werror", "-O2", "-S", "-o", ptx, all)
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "unsupported") || strings.Contains(string(out), "cannot find") {
			t.Skipf("%s cannot compile CUDA here: %s", clang, out)
		}
		t.Fatalf("%s: %v\n%s", clang, err, out)
	}
	data, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[kernel]bool{}
	for _, m := range regexp.MustCompile(`\.visible \.entry (\w+)\(`).FindAllStringSubmatch(string(data), -1) {
		entries[kernel(m[1])] = true
	}
	for k := range kernelSignatures {
		if !entries[k] {
			t.Errorf("kernel %s is missing from the PTX", k)
		}
	}
}
