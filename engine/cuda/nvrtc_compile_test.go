package cuda

import (
	"errors"
	"regexp"
	"strconv"
	"testing"
)

// TestKernelsCompileWithNVRTC compiles the kernels with the real NVRTC,
// when the machine has one (no GPU needed; Debian: apt-get install
// libnvrtc11.2 libnvrtc-builtins11.8 from non-free), for the
// architectures memtrain targets, with the options the backend uses: what
// neither the g++ emulator nor clang can vouch for. Every kernel must be an
// entry of the PTX, and every kernel that launches more than 256 threads a
// block must say so with __launch_bounds__ (NVRTC otherwise may give it
// more registers than a block of that many threads can have, and the
// launch fails on the GPU).
func TestKernelsCompileWithNVRTC(t *testing.T) {
	if !canLoad {
		t.Skip("no dynamic loading in this build")
	}
	rtc := &nvrtcAPI{}
	h, path, err := loadLibrary(libNVRTC, systemEnv())
	if err == nil {
		err = bindAll(h, path, rtc.symbols())
	}
	if errors.Is(err, ErrNoCUDA) || err != nil && h == 0 {
		t.Skipf("no NVRTC on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var major, minor int32
	rtc.nvrtcVersion(&major, &minor)
	t.Logf("NVRTC %d.%d from %s", major, minor, path)
	src, headers := kernelSource()
	for _, arch := range []int{80, 90} {
		target := kernelTarget{arch: arch}
		ptx, err := compileKernels(rtc, src, headers, nvrtcOptions(target), target)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		entries := map[kernel]bool{}
		for _, m := range regexp.MustCompile(`\.entry (\w+)\(`).FindAllStringSubmatch(string(ptx), -1) {
			entries[kernel(m[1])] = true
		}
		for k := range kernelSignatures {
			if !entries[k] {
				t.Errorf("%s: kernel %s is missing from the PTX", target, k)
			}
		}
		// .maxntid in the PTX is __launch_bounds__' first argument: the
		// kernels whose blocks pass 256 threads must carry theirs.
		bounds := map[string]int{}
		for _, m := range regexp.MustCompile(`\.entry (\w+)\([^)]*\)\s*\.maxntid (\d+)`).FindAllStringSubmatch(string(ptx), -1) {
			bounds[m[1]], _ = strconv.Atoi(m[2])
		}
		for k, threads := range map[string]int{
			"cross_entropy": crossEntropyThreads, "sum_squares_final": sumSquaresThreads,
			"rmsnorm": rmsnormThreads, "rmsnorm_backward_dx": rmsnormThreads,
			"widen_bf16_matrix": widenThreads, "adamw_multi": adamWThreads,
		} {
			if bounds[k] < threads {
				t.Errorf("%s: kernel %s launches %d threads a block, its launch bounds allow %d", target, k, threads, bounds[k])
			}
		}
		bounded := bounds
		t.Logf("%s: %d kernels, %d with launch bounds, %d bytes of PTX", target, len(entries), len(bounded), len(ptx))
	}
}
