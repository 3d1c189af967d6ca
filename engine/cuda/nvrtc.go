package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// CacheEnv names the environment variable that sets the folder of compiled
// kernels.
const CacheEnv = "MEMTRAIN_CUDA_CACHE"

// kernelTarget is what NVRTC compiles for: a real architecture (sm_90,
// machine code the driver loads as is) or a virtual one (compute_90, PTX
// the driver compiles when it loads it).
type kernelTarget struct {
	arch  int  // 90 for compute capability 9.0
	cubin bool // sm_XX machine code rather than compute_XX PTX
}

func (t kernelTarget) String() string {
	if t.cubin {
		return fmt.Sprintf("sm_%d", t.arch)
	}
	return fmt.Sprintf("compute_%d", t.arch)
}

// ext is the cache file's extension.
func (t kernelTarget) ext() string {
	if t.cubin {
		return ".cubin"
	}
	return ".ptx"
}

// chooseTarget picks what to compile for a device of compute capability
// cc (e.g. 90), given the architectures this NVRTC supports (nil when it
// cannot say) and whether it can emit CUBIN. Machine code for the device
// itself is best: it loads with any driver that runs the device. When
// NVRTC is older than the device, PTX for the newest architecture it knows
// below the device is the way out, compiled by the driver at load time.
func chooseTarget(cc int, supported []int, canCUBIN bool) (kernelTarget, error) {
	if supported == nil {
		return kernelTarget{arch: cc, cubin: canCUBIN}, nil
	}
	best := 0
	for _, a := range supported {
		if a == cc && canCUBIN {
			return kernelTarget{arch: cc, cubin: true}, nil
		}
		if a <= cc && a > best {
			best = a
		}
	}
	if best == 0 {
		return kernelTarget{}, fmt.Errorf("cuda: NVRTC supports none of the architectures up to sm_%d (it knows %v)", cc, supported)
	}
	return kernelTarget{arch: best}, nil
}

// nvrtcOptions are the options the kernels are compiled with: the target,
// and for the exact path (exact: GEMMs in f32, where the backend claims
// the CPU's results) --fmad=false, since NVRTC otherwise fuses a multiply
// and an add into one rounding where the CPU backend, and the stand-in's
// C++ compiled with -ffp-contract=off, round twice. NVRTC's defaults are
// already IEEE division and square root and no fast math. The mixed
// precision paths keep the fused multiply-adds: faster, and within their
// tolerances.
func nvrtcOptions(t kernelTarget, exact bool) []string {
	opts := []string{"--gpu-architecture=" + t.String()}
	if exact {
		opts = append(opts, "--fmad=false")
	}
	return opts
}

// cacheKey names a compiled program in the cache: a hash of everything
// that goes into the compilation — NVRTC's version, the target, the
// options, the source and the headers.
func cacheKey(nvrtcVersion string, t kernelTarget, options []string, src string, headers map[string]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "nvrtc %s\ntarget %s\n", nvrtcVersion, t)
	for _, o := range options {
		fmt.Fprintf(h, "option %q\n", o)
	}
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "header %q %d\n%s", n, len(headers[n]), headers[n])
	}
	fmt.Fprintf(h, "source %d\n%s", len(src), src)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// kernelCacheDir is the folder of compiled kernels: dir when set, else
// $MEMTRAIN_CUDA_CACHE, else memtrain/cuda in the user's cache folder.
func kernelCacheDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if d := os.Getenv(CacheEnv); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "memtrain", "cuda"), nil
}

// kernelImage returns the compiled kernels for this device: from the cache
// when a matching file is there, else compiled by NVRTC and written to the
// cache (atomically; a cache that cannot be written only costs a compile
// next time). It runs on the worker thread.
func (b *Backend) kernelImage(cacheDir string) ([]byte, error) {
	rtc := b.libs.rtc
	var major, minor int32
	if r := rtc.nvrtcVersion(&major, &minor); r != 0 {
		return nil, fmt.Errorf("cuda: nvrtcVersion: %s", rtc.nvrtcGetErrorString(r))
	}
	b.info.NVRTCVersion = fmt.Sprintf("%d.%d", major, minor)
	var supported []int
	if rtc.nvrtcGetNumSupportedArchs != nil && rtc.nvrtcGetSupportedArchs != nil {
		var n int32
		if rtc.nvrtcGetNumSupportedArchs(&n) == 0 && n > 0 {
			archs := make([]int32, n)
			if rtc.nvrtcGetSupportedArchs(&archs[0]) == 0 {
				for _, a := range archs {
					supported = append(supported, int(a))
				}
			}
		}
	}
	target, err := chooseTarget(b.info.Major*10+b.info.Minor, supported, rtc.nvrtcGetCUBIN != nil && rtc.nvrtcGetCUBINSize != nil)
	if err != nil {
		return nil, err
	}
	b.info.KernelTarget = target.String()
	src, headers := kernelSource()
	options := nvrtcOptions(target, b.gemmMode == GemmF32)
	key := cacheKey(b.info.NVRTCVersion, target, options, src, headers)

	dir, dirErr := kernelCacheDir(cacheDir)
	path := ""
	if dirErr == nil {
		b.info.KernelCacheDir = dir
		path = filepath.Join(dir, key+target.ext())
		if img, err := os.ReadFile(path); err == nil && len(img) > 0 {
			b.info.KernelsCached = true
			return img, nil
		}
	}
	img, err := compileKernels(rtc, src, headers, options, target)
	if err != nil {
		return nil, fmt.Errorf("%w (NVRTC %s from %s)", err, b.info.NVRTCVersion, b.libs.paths[libNVRTC.name])
	}
	if path != "" {
		writeCache(dir, path, img)
	}
	return img, nil
}

// writeCache stores a compiled image, through a temporary file and a
// rename so that a reader never sees half of one. Failures are ignored.
func writeCache(dir, path string, img []byte) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return
	}
	_, werr := f.Write(img)
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(f.Name(), path) != nil {
		os.Remove(f.Name())
	}
}

// compileKernels runs NVRTC on the program. On failure the error carries
// NVRTC's log.
func compileKernels(rtc *nvrtcAPI, src string, headers map[string]string, options []string, target kernelTarget) ([]byte, error) {
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	sort.Strings(names)
	var keep [][]byte // the C strings, alive until the calls return
	cstr := func(s string) *byte {
		b := append([]byte(s), 0)
		keep = append(keep, b)
		return &b[0]
	}
	hdrs, incs := make([]*byte, len(names)), make([]*byte, len(names))
	for i, n := range names {
		hdrs[i], incs[i] = cstr(headers[n]), cstr(n)
	}
	opts := make([]*byte, len(options))
	for i, o := range options {
		opts[i] = cstr(o)
	}
	var prog uintptr
	if r := rtc.nvrtcCreateProgram(&prog, src, kernelProgramName, int32(len(names)), pointerTo(hdrs), pointerTo(incs)); r != 0 {
		return nil, fmt.Errorf("cuda: nvrtcCreateProgram: %s", rtc.nvrtcGetErrorString(r))
	}
	defer rtc.nvrtcDestroyProgram(&prog)
	if r := rtc.nvrtcCompileProgram(prog, int32(len(opts)), pointerTo(opts)); r != 0 {
		return nil, fmt.Errorf("cuda: compiling the kernels for %s: %s: %s", target, rtc.nvrtcGetErrorString(r), programLog(rtc, prog))
	}
	runtime.KeepAlive(keep)
	var size uint64
	get, getSize, what := rtc.nvrtcGetPTX, rtc.nvrtcGetPTXSize, "PTX"
	if target.cubin {
		get, getSize, what = rtc.nvrtcGetCUBIN, rtc.nvrtcGetCUBINSize, "CUBIN"
	}
	if r := getSize(prog, &size); r != 0 || size == 0 {
		return nil, fmt.Errorf("cuda: nvrtcGet%sSize: %s", what, rtc.nvrtcGetErrorString(r))
	}
	img := make([]byte, size)
	if r := get(prog, &img[0]); r != 0 {
		return nil, fmt.Errorf("cuda: nvrtcGet%s: %s", what, rtc.nvrtcGetErrorString(r))
	}
	return img, nil
}

// programLog is NVRTC's compilation log, trimmed.
func programLog(rtc *nvrtcAPI, prog uintptr) string {
	var size uint64
	if rtc.nvrtcGetProgramLogSize(prog, &size) != 0 || size <= 1 {
		return "(no log)"
	}
	log := make([]byte, size)
	if rtc.nvrtcGetProgramLog(prog, &log[0]) != 0 {
		return "(no log)"
	}
	return strings.TrimSpace(cString(&log[0]))
}
