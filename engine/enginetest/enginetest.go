// Package enginetest is the conformance suite every engine.Backend must
// pass. It runs each kernel on random inputs and compares the results with
// plain float64 implementations written here (reference.go), which are the
// specification in code; its own tests prove those references right by
// finite differences, so a backend that matches them is right too.
//
// The suite talks to a backend only through the engine.Backend interface
// (Alloc, Upload, Download and the kernels), never through a backend's
// internals, so that the CUDA backend runs the same checks as the CPU one:
//
//	func TestConformance(t *testing.T) {
//		enginetest.Run(t, func() engine.Backend { return cpu.New(cpu.Options{Threads: 2}) })
//	}
//
// Besides values, it checks the contracts of the interface: outputs that
// are overwritten (they are pre-filled with NaN), gradients that
// accumulate (a second backward call doubles the increment), views at
// nonzero offsets (every tensor is a view into a larger allocation whose
// margins hold sentinels that must survive and must not be read), GEMM
// padding that must not be read or written, Beta = 0 over NaN, weight-0
// rows with target −1, Argmax ties, bit-identical reruns, and misuse
// (misuse.go): bad arguments refused with an *engine.Misuse of the
// right method and class, the backend working on. BF16 tensors
// are checked where the interface takes them: transfers that round to
// nearest even and widen exactly, Fill, Copy, Gemm by a BF16 B with A and
// C F32 (frozen weights); and mixed precision: Gemm of BF16 A and B into
// F32 or BF16 C, the activation kernels on BF16 activations, and
// AdamWStep's refresh of BF16 weight copies. A bf16 output's tolerance
// is its float32 computation's plus its one rounding, 2⁻⁸ of each element.
//
// Tolerances are stated per kernel as a bound on the largest absolute
// error relative to the largest reference magnitude,
//
//	max|got − ref| ≤ tol · max(max|ref|, 1e-6)
//
// with tol a few float32 epsilons for elementwise kernels and scaled by
// √K for kernels that sum K terms.
package enginetest

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
)

// Config tunes a run of the suite.
type Config struct {
	// New returns a fresh backend. Each subtest gets its own, and frees
	// every tensor it allocates.
	New func() engine.Backend
	// Tolerance multiplies every tolerance; 0 means 1. A backend that
	// computes in lower precision (TF32 GEMMs, say) raises it.
	Tolerance float64
	// Seed seeds the random inputs; 0 means a fixed default.
	Seed uint64
	// NoBF16 skips the cases of BF16 tensors (Alloc, Upload, Download,
	// Fill, Copy and a Gemm by a BF16 B), for a backend without them.
	NoBF16 bool
	// Poisoned says that the backends New returns poison Empty tensors
	// (engine.Poison): the suite then checks that they hold NaN (I32:
	// −1) rather than only that they can be written and read.
	Poisoned bool
}

// Run runs the conformance suite against the backends newBackend returns.
func Run(t *testing.T, newBackend func() engine.Backend) {
	RunConfig(t, Config{New: newBackend})
}

// RunConfig runs the conformance suite with the given configuration.
func RunConfig(t *testing.T, cfg Config) {
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 1
	}
	if cfg.Seed == 0 {
		cfg.Seed = 0x6d656d747261696e // "memtrain"
	}
	tests := []struct {
		name string
		fn   func(*harness)
	}{
		{"Memory", testMemory},
		{"Transfer", testTransfer},
		{"Gemm", testGemm},
		{"GemmBetaZeroNaN", testGemmBetaZeroNaN},
		{"GemmKZero", testGemmKZero},
		{"BF16", testBF16},
		{"GemmBF16B", testGemmBF16B},
		{"Elementwise", testElementwise},
		{"SumSquares", testSumSquares},
		{"Embedding", testEmbedding},
		{"RMSNorm", testRMSNorm},
		{"RoPE", testRoPE},
		{"SwiGLU", testSwiGLU},
		{"Attention", testAttention},
		{"AttentionKV", testAttentionKV},
		{"CrossEntropy", testCrossEntropy},
		{"Argmax", testArgmax},
		{"AdamW", testAdamW},
		{"Determinism", testDeterminism},
		// New cases go last: each case's inputs are seeded by its index.
		{"EmbeddingBF16", testEmbeddingBF16},
		{"Sum", testSum},
		{"AdamWStep", testAdamWStep},
		{"SumSquaresMulti", testSumSquaresMulti},
		{"GemmBF16", testGemmBF16},
		{"ActivationsBF16", testActivationsBF16},
		{"AdamWStepCopyBF16", testAdamWStepCopy},
		{"CrossEntropyBF16", testCrossEntropyBF16},
		{"Empty", testEmpty},
		{"AddRMSNorm", testAddRMSNorm},
		{"Bias", testBias},
		{"BiasBF16", testBiasBF16},
	}
	for i, tc := range tests {
		if cfg.NoBF16 && strings.Contains(tc.name, "BF16") {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(newHarness(t, cfg, cfg.Seed+uint64(i)))
		})
	}
	// Bad arguments are part of the contract: each case of misuse.go on
	// a backend of its own, as Misuse/<case>.
	t.Run("Misuse", func(t *testing.T) { testMisuses(t, cfg, cfg.Seed+uint64(len(tests))) })
}
