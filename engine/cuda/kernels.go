package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The kernels are CUDA C sources embedded in the binary and compiled by
// NVRTC for the device at hand (nvrtc.go).
//
//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// kernel names a __global__ function of the sources. Every launch names
// its kernel with one of these constants; a test checks that each exists
// in the sources, and launch checks every argument against the kernel's
// parameter list (kernelSignatures).
type kernel string

const (
	kCast                   kernel = "cast"
	kAdd                    kernel = "add"
	kAxpy                   kernel = "axpy"
	kScale                  kernel = "scale"
	kScaleMatrix            kernel = "scale_matrix"
	kWidenBF16Matrix        kernel = "widen_bf16_matrix"
	kSumSquaresPartial      kernel = "sum_squares_partial"
	kSumSquaresFinal        kernel = "sum_squares_final"
	kSumSquaresMultiPartial kernel = "sum_squares_multi_partial"
	kSumSquaresMultiFinal   kernel = "sum_squares_multi_final"
	kEmbedding              kernel = "embedding"
	kEmbeddingBackward      kernel = "embedding_backward"
	kRMSNorm                kernel = "rmsnorm"
	kAddRMSNorm             kernel = "add_rmsnorm"
	kRMSNormBackwardDx      kernel = "rmsnorm_backward_dx"
	kRMSNormBackwardDwPart  kernel = "rmsnorm_backward_dw_partial"
	kRMSNormBackwardDwFinal kernel = "rmsnorm_backward_dw_final"
	kAddBias                kernel = "add_bias"
	kBiasGradPart           kernel = "bias_grad_partial"
	kRoPE                   kernel = "rope"
	kRoPETable              kernel = "rope_table"
	kFlashAttention         kernel = "flash_attention"
	kAttentionRowDot        kernel = "attention_row_dot"
	kFlashAttentionDKV      kernel = "flash_attention_backward_dkv"
	kFlashAttentionDQ       kernel = "flash_attention_backward_dq"
	kAttentionKV            kernel = "attention_kv"
	kSwiGLU                 kernel = "swiglu"
	kSwiGLUBackward         kernel = "swiglu_backward"
	kCrossEntropy           kernel = "cross_entropy"
	kArgmax                 kernel = "argmax"
	kAdamW                  kernel = "adamw"
	kAdamWMulti             kernel = "adamw_multi"
	kSplitMaster            kernel = "split_master"
	kJoinMaster             kernel = "join_master"
	kInt8Codec              kernel = "int8_codec"
)

const (
	kernelSourceDir   = "kernels"
	kernelProgramName = "memtrain.cu" // the program's name in NVRTC's messages

	// Constants the Go code shares with the sources (a test compares
	// them with the #defines).
	sumSquaresBlock  = 16384 // SUMSQ_BLOCK in elementwise.cu
	vecElems         = 8     // VEC in common.cuh: the elements a thread moves at once
	sumSquaresFields = 4     // SUMSQ_FIELDS in elementwise.cu
	argmaxThreads    = 256   // ARGMAX_THREADS in crossentropy.cu
	// The most threads a block of these kernels launches with: their
	// __launch_bounds__, so that NVRTC keeps their registers within what
	// a block of that many threads may have.
	crossEntropyThreads = 1024 // CE_THREADS in crossentropy.cu
	sumSquaresThreads   = 1024 // SUMSQ_THREADS in elementwise.cu
	rmsnormThreads      = 512  // RMSNORM_THREADS in rmsnorm.cu
	faThreads           = 128  // FA_THREADS in attention.cu
	widenThreads        = 256  // WIDEN_THREADS in elementwise.cu
	faRows              = 16   // FA_ROWS in attention.cu
	faAccumulators      = 16   // FA_ACC in attention.cu
	adamWThreads        = 256  // ADAMW_THREADS in adamw.cu
	adamWChunk          = 4096 // ADAMW_CHUNK in adamw.cu
	adamWFields         = 20   // ADAMW_FIELDS in adamw.cu
)

// kernelFileNames lists the kernel folder's files, in name order.
func kernelFileNames() ([]string, error) {
	entries, err := fs.ReadDir(kernelFS, kernelSourceDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// kernelSource returns the program NVRTC compiles: every .cu file in name
// order, concatenated, and the headers they include, by name.
func kernelSource() (src string, headers map[string]string) {
	headers = map[string]string{}
	var b strings.Builder
	names, err := kernelFileNames()
	if err != nil {
		panic(err) // the embedded folder is always there
	}
	for _, base := range names {
		data, err := kernelFS.ReadFile(kernelSourceDir + "/" + base)
		if err != nil {
			panic(err) // embedded files are always readable
		}
		if strings.HasSuffix(base, ".cuh") {
			headers[base] = string(data)
			continue
		}
		fmt.Fprintf(&b, "// ---- %s\n%s\n", base, data)
	}
	return b.String(), headers
}

// argKind is the type of a kernel parameter as a launch passes it.
type argKind uint8

const (
	argPtr     argKind = iota // any pointer: a devptr
	argInt32                  // int
	argInt64                  // i64 (long long)
	argFloat32                // float
)

func (k argKind) String() string {
	return [...]string{"pointer", "int", "i64", "float"}[k]
}

// globalRE matches the head of a kernel definition up to its parameter
// list: extern "C" __global__ void name(, with an optional
// __launch_bounds__(…) before the name.
var globalRE = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\(`)

// parseKernels reads the kernels' parameter lists from CUDA C source: the
// name and the kind of every parameter of each extern "C" __global__
// function.
func parseKernels(src string) (map[kernel][]argKind, error) {
	sigs := map[kernel][]argKind{}
	for _, m := range globalRE.FindAllStringSubmatchIndex(src, -1) {
		name := kernel(src[m[2]:m[3]])
		end := strings.IndexByte(src[m[1]:], ')')
		if end < 0 {
			return nil, fmt.Errorf("kernel %s: unterminated parameter list", name)
		}
		var kinds []argKind
		for _, p := range strings.Split(src[m[1]:m[1]+end], ",") {
			p = strings.Join(strings.Fields(p), " ")
			if p == "" || p == "void" {
				continue
			}
			k, err := paramKind(p)
			if err != nil {
				return nil, fmt.Errorf("kernel %s: %v", name, err)
			}
			kinds = append(kinds, k)
		}
		if _, dup := sigs[name]; dup {
			return nil, fmt.Errorf("kernel %s defined twice", name)
		}
		sigs[name] = kinds
	}
	return sigs, nil
}

// paramKind classifies one C parameter declaration, e.g. "const void* x".
func paramKind(p string) (argKind, error) {
	if strings.Contains(p, "*") {
		return argPtr, nil
	}
	fields := strings.Fields(p)
	if len(fields) < 2 {
		return 0, fmt.Errorf("parameter %q has no name", p)
	}
	switch strings.Join(fields[:len(fields)-1], " ") {
	case "int", "const int":
		return argInt32, nil
	case "i64", "const i64", "long long", "const long long":
		return argInt64, nil
	case "float", "const float":
		return argFloat32, nil
	}
	return 0, fmt.Errorf("parameter %q has a type launch cannot pass", p)
}

// boundsRE matches a kernel's __launch_bounds__ and its name, and
// defineRE the integer #defines the bounds are written with.
var (
	boundsRE = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+__launch_bounds__\s*\(\s*([A-Za-z_0-9]+)\s*\)\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
	defineRE = regexp.MustCompile(`(?m)^#define\s+([A-Z_][A-Z0-9_]*)\s+(\d+)\s*$`)
)

// parseBounds reads every kernel's __launch_bounds__ (its first argument,
// the most threads a block may have) from the sources, resolving the
// #defines they name; a kernel without bounds is an error, so that none
// is compiled for an unknown block size.
func parseBounds(src string, headers map[string]string, sigs map[kernel][]argKind) (map[kernel]int, error) {
	defs := map[string]int{}
	all := src
	for _, h := range headers {
		all += "\n" + h
	}
	for _, m := range defineRE.FindAllStringSubmatch(all, -1) {
		v, err := strconv.Atoi(m[2])
		if err != nil {
			return nil, fmt.Errorf("#define %s %s: %v", m[1], m[2], err)
		}
		defs[m[1]] = v
	}
	bounds := map[kernel]int{}
	for _, m := range boundsRE.FindAllStringSubmatch(src, -1) {
		v, err := strconv.Atoi(m[1])
		if err != nil {
			var ok bool
			if v, ok = defs[m[1]]; !ok {
				return nil, fmt.Errorf("kernel %s: __launch_bounds__(%s) is neither a number nor a #define", m[2], m[1])
			}
		}
		bounds[kernel(m[2])] = v
	}
	for k := range sigs {
		if bounds[k] <= 0 {
			return nil, fmt.Errorf("kernel %s has no __launch_bounds__", k)
		}
	}
	return bounds, nil
}

// kernelBounds are the kernels' launch bounds: launch refuses a block
// larger than its kernel's, which NVRTC sized its registers for.
var kernelBounds = func() map[kernel]int {
	src, headers := kernelSource()
	b, err := parseBounds(src, headers, kernelSignatures)
	if err != nil {
		panic("cuda: embedded kernels: " + err.Error())
	}
	return b
}()

// kernelSignatures are the parameter lists of every kernel in the embedded
// sources, read once at start-up.
var kernelSignatures = func() map[kernel][]argKind {
	src, _ := kernelSource()
	sigs, err := parseKernels(src)
	if err != nil {
		panic("cuda: embedded kernels: " + err.Error())
	}
	return sigs
}()
