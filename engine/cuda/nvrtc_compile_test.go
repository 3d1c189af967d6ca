package cuda

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

// knownFrames are the stack frames NVRTC 11.8 gives kernels today, in
// bytes by architecture, each a known exception to "no frame" with its
// reason; a kernel whose frame grows past its entry fails the test.
//   - rope_table: double-precision sincos, whose argument reduction for huge
//     angles (Payne–Hanek) keeps a table on the stack; the fast path that
//     every position below 2^20 takes does not touch it.
//   - the float32 attention backward kernels keep a few accumulators in
//     local memory even with their loops unrolled (MT_UNROLL): on sm_80
//     40 bytes of dq's and 56 (64 with --fmad=false) of dk/dv's, on sm_90
//     24 of dq's and 64 of dk/dv's. Before the sliding window's loop
//     bounds (a key tile's last reaching query, a query tile's first
//     reached key tile) they were 24 and 0 on sm_80, 0 and 64 on sm_90;
//     ptxas's choice moves with any change to those bounds (an early
//     break or continue instead moved the frames between kernels and
//     architectures rather than removing them). Measured here without a
//     GPU, so what they cost is not known.
var knownFrames = map[int]map[string]int{
	80: {"rope_table": 48, "flash_attention_backward_dq": 40, "flash_attention_backward_dkv": 64},
	90: {"rope_table": 48, "flash_attention_backward_dq": 24, "flash_attention_backward_dkv": 64},
}

// loadNVRTC binds the machine's NVRTC for a compile test, skipping the
// test where there is none (failing it under MEMTRAIN_REQUIRE_NVRTC=1).
func loadNVRTC(t *testing.T) *nvrtcAPI {
	t.Helper()
	required := os.Getenv("MEMTRAIN_REQUIRE_NVRTC") == "1"
	if !canLoad {
		if required {
			t.Fatal("no dynamic loading in this build, and MEMTRAIN_REQUIRE_NVRTC=1")
		}
		t.Skip("no dynamic loading in this build")
	}
	rtc := &nvrtcAPI{}
	h, path, err := loadLibrary(libNVRTC, systemEnv())
	if err == nil {
		err = bindAll(h, path, rtc.symbols())
	}
	if errors.Is(err, ErrNoCUDA) || err != nil && h == 0 {
		if required {
			t.Fatalf("no NVRTC on this machine, and MEMTRAIN_REQUIRE_NVRTC=1: %v", err)
		}
		t.Skipf("no NVRTC on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var major, minor int32
	rtc.nvrtcVersion(&major, &minor)
	t.Logf("NVRTC %d.%d from %s", major, minor, path)
	if rtc.nvrtcGetCUBIN == nil || rtc.nvrtcGetCUBINSize == nil {
		t.Fatalf("NVRTC %d.%d cannot emit CUBIN (nvrtcGetCUBIN is 11.1 and later)", major, minor)
	}
	return rtc
}

// TestKernelsCompileWithNVRTC compiles the kernels with the real NVRTC,
// when the machine has one (no GPU needed; Debian: apt-get install
// libnvrtc11.2 libnvrtc-builtins11.8 from non-free), for the
// architectures memtrain targets, with the options the backend uses: what
// neither the g++ emulator nor clang can vouch for. With
// MEMTRAIN_REQUIRE_NVRTC=1 (.ci/run sets it) a missing NVRTC fails the
// test instead of skipping it.
//
// For sm_80 and sm_90 it compiles machine code (CUBIN), reads each
// kernel's registers, launch bounds and stack frame from the ELF's
// .nv.info sections, prints them as a table, and fails when
//   - a kernel is missing, or its compiled bound differs from the
//     __launch_bounds__ that launch enforces (kernelBounds);
//   - registers, rounded up to the allocation unit of 8, times the bound
//     exceed the 65,536 registers of a multiprocessor: a block of that
//     many threads could not launch;
//   - a kernel has a stack frame (local memory: registers spilled), but
//     for the known ones listed in knownFrames.
//
// Both the exact options (--fmad=false, for f32 GEMMs) and the fast ones
// are compiled. The PTX compile is also checked for the tensor-core
// instructions (checkTensorCorePTX) and the memory-bound kernels' 128-bit
// accesses (checkVectorAccesses).
//
// Five compiles of every kernel take about a minute of CPU: the test runs
// where nvrtcTestEnv is 1, which .ci/run sets in a step of its own, so
// that go test ./... stays within its budget.
func TestKernelsCompileWithNVRTC(t *testing.T) {
	if os.Getenv(nvrtcTestEnv) != "1" {
		t.Skipf("the real NVRTC compile, about a minute of CPU: .ci/run runs it in its own step; set %s=1 to run it here", nvrtcTestEnv)
	}
	loadNVRTC(t) // skips, or fails, here where there is none
	names := make([]string, 0, len(kernelSignatures))
	for k := range kernelSignatures {
		names = append(names, string(k))
	}
	sort.Strings(names)
	jobs := []nvrtcJob{{80, true, false}, {90, true, false}, {80, true, true}, {90, true, true}, {80, false, false}}
	imgs := compileSideBySide(t, jobs)
	for i, c := range jobs[:4] {
		target := kernelTarget{arch: c.Arch, cubin: true}
		img := imgs[i]
		attrs, err := cubinKernelAttrs(img)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		var table strings.Builder
		fmt.Fprintf(&table, "%s, options %q: %d bytes of CUBIN\n%-32s %9s %11s %11s %12s\n", target, nvrtcOptions(target, c.Exact)[1:], len(img), "kernel", "registers", "max threads", "frame bytes", "regs × block")
		for _, name := range names {
			a, ok := attrs[name]
			if !ok {
				t.Errorf("%s: kernel %s is missing from the CUBIN", target, name)
				continue
			}
			bound := kernelBounds[kernel(name)]
			perBlock := (a.Registers + 7) / 8 * 8 * bound
			fmt.Fprintf(&table, "%-32s %9d %11d %11d %12d\n", name, a.Registers, a.MaxThreads, a.FrameBytes, perBlock)
			if a.MaxThreads != bound {
				t.Errorf("%s: kernel %s compiled for blocks of %d threads, launched with up to %d (__launch_bounds__)", target, name, a.MaxThreads, bound)
			}
			if perBlock > 65536 {
				t.Errorf("%s: kernel %s: %d registers × %d threads = %d, beyond a multiprocessor's 65,536", target, name, a.Registers, bound, perBlock)
			}
			if limit := knownFrames[target.arch][name]; a.FrameBytes > limit {
				t.Errorf("%s: kernel %s has a %d-byte stack frame (local memory: spills, or an array the compiler could not keep in registers)", target, name, a.FrameBytes)
			}
		}
		t.Log(table.String())
	}
	checkTensorCorePTX(t, kernelTarget{arch: 80}, imgs[4])
	checkVectorAccesses(t, string(imgs[4]))
}

// nvrtcTestEnv runs TestKernelsCompileWithNVRTC where it is 1.
const nvrtcTestEnv = "MEMTRAIN_NVRTC_TEST"

// nvrtcJobEnv makes the test binary a compile worker (TestNVRTCWorker)
// that compiles the kernels for one target and writes the image to a
// file. TestKernelsCompileWithNVRTC runs its five compiles in workers side
// by side, a core each: each takes a core for some 20 s, and NVRTC 11.8
// does not promise that one process may compile on several threads.
const nvrtcJobEnv = "MEMTRAIN_NVRTC_JOB"

// An nvrtcJob is one compile of the kernels: for an architecture, to CUBIN
// (else PTX), with the exact options (else the fast ones).
type nvrtcJob struct {
	Arch         int
	CUBIN, Exact bool
}

// TestNVRTCWorker is a compile worker, run only as a child of
// TestKernelsCompileWithNVRTC (nvrtcJobEnv).
func TestNVRTCWorker(t *testing.T) {
	spec := os.Getenv(nvrtcJobEnv)
	if spec == "" {
		t.Skip("a compile worker of TestKernelsCompileWithNVRTC, run only as its child")
	}
	var job struct {
		nvrtcJob
		Out string
	}
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		t.Fatalf("%s=%s: %v", nvrtcJobEnv, spec, err)
	}
	rtc := loadNVRTC(t)
	src, headers := kernelSource()
	target := kernelTarget{arch: job.Arch, cubin: job.CUBIN}
	img, err := compileKernels(rtc, src, headers, nvrtcOptions(target, job.Exact), target)
	if err != nil {
		t.Fatalf("%s (exact %v): %v", target, job.Exact, err)
	}
	if err := os.WriteFile(job.Out, img, 0o644); err != nil {
		t.Fatal(err)
	}
}

// compileSideBySide compiles the jobs in worker processes, as many at once
// as there are cores, and returns their images in the jobs' order.
func compileSideBySide(t *testing.T, jobs []nvrtcJob) [][]byte {
	t.Helper()
	dir := t.TempDir()
	imgs := make([][]byte, len(jobs))
	errs := make([]error, len(jobs))
	slots := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			out := filepath.Join(dir, fmt.Sprint(i))
			spec, err := json.Marshal(struct {
				nvrtcJob
				Out string
			}{job, out})
			if err != nil {
				errs[i] = err
				return
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestNVRTCWorker$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), nvrtcJobEnv+"="+string(spec))
			if b, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("%v\n%s", err, b)
				return
			}
			imgs[i], errs[i] = os.ReadFile(out)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("compile %+v: %v", jobs[i], err)
		}
	}
	return imgs
}

// tensorCoreInstructions are the PTX instructions each tensor-core kernel
// must hold (kernels/warp.cuh's primitives, inlined): without them it
// would not run on tensor cores, whatever its results.
var tensorCoreInstructions = map[kernel][]string{
	kFlashMMAForward64:   {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global", "cp.async.wait_group"},
	kFlashMMAForward128:  {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global", "cp.async.wait_group"},
	kFlashMMABackward64:  {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global", "ld.acquire.gpu", "st.release.gpu"},
	kFlashMMABackward128: {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global", "ld.acquire.gpu", "st.release.gpu"},
}

// checkTensorCorePTX checks that each tensor-core kernel's body in the
// program's PTX (for compute_80, the fast options) holds its instructions.
func checkTensorCorePTX(t *testing.T, target kernelTarget, img []byte) {
	ptx := string(img)
	for k, instrs := range tensorCoreInstructions {
		start := strings.Index(ptx, ".entry "+string(k)+"(")
		if start < 0 {
			t.Errorf("%s: no entry %s in the PTX", target, k)
			continue
		}
		body := ptx[start+1:]
		if end := strings.Index(body, ".entry "); end >= 0 {
			body = body[:end]
		}
		var counts []string
		for _, in := range instrs {
			n := strings.Count(body, in)
			if n == 0 {
				t.Errorf("%s: kernel %s has no %s", target, k, in)
			}
			counts = append(counts, fmt.Sprintf("%s ×%d", in, n))
		}
		t.Logf("%s %s: %s", target, k, strings.Join(counts, ", "))
	}
}
