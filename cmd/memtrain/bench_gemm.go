package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/engine/gemm"
)

// maxBenchGemmElems bounds the three matrices of one `bench gemm` case
// (4 bytes an element): 2³¹ elements is 8 GiB.
const maxBenchGemmElems = 1 << 31

type benchGemmFlags struct {
	sizes     string
	threads   int
	repeat    int
	reference bool
}

// benchGemmResult is the JSON line `bench gemm` prints for each case.
type benchGemmResult struct {
	Impl    string  `json:"impl"`
	M       int     `json:"m"`
	N       int     `json:"n"`
	K       int     `json:"k"`
	Threads int     `json:"threads"`
	GFLOPs  float64 `json:"gflops"`
}

func newBenchGemmCmd() *cobra.Command {
	var f benchGemmFlags
	cmd := &cobra.Command{
		Use:   "gemm [--sizes 512,1024,2048] [--threads N] [--repeat R] [--reference]",
		Short: "Measure float32 matrix-multiply speed (Go kernels, OpenBLAS, gonum)",
		Long: `gemm times C = A·B on random float32 matrices and prints one JSON line a case,
{"impl","m","n","k","threads","gflops"}, where gflops is 2·m·n·k divided by the
median time of --repeat runs after one warm-up run.

It measures memtrain's Go kernels ("go") and, when the library loads, OpenBLAS
("openblas"; see $MEMTRAIN_OPENBLAS and $OPENBLAS_CORETYPE), and with
--reference also gonum's pure-Go blas32 on one thread ("gonum"). OpenBLAS runs
last, because its idle threads keep polling for a while after each call and
would slow whatever ran next. A size is N for an N³ product or MxNxK.`,
		Example: `  memtrain bench gemm
  memtrain bench gemm --sizes 1024,4096x1024x384 --threads 2 --repeat 9
  OPENBLAS_CORETYPE=SkylakeX memtrain bench gemm --sizes 2048 --reference`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchGemm(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.sizes, "sizes", "512,1024,2048", "comma-separated sizes: N for N×N×N, or MxNxK")
	fl.IntVar(&f.threads, "threads", 0, "threads for the Go kernels and OpenBLAS (default all cores)")
	fl.IntVar(&f.repeat, "repeat", 5, "timed runs a case; the median is reported")
	fl.BoolVar(&f.reference, "reference", false, "also time gonum's blas32 (one thread, slow)")
	return cmd
}

func runBenchGemm(cmd *cobra.Command, f benchGemmFlags) error {
	sizes, err := parseGemmSizes(f.sizes)
	if err != nil {
		return fmt.Errorf("bench gemm: --sizes: %w", err)
	}
	if f.repeat < 1 {
		return fmt.Errorf("bench gemm: --repeat %d: want at least 1", f.repeat)
	}
	if f.threads < 0 {
		return fmt.Errorf("bench gemm: --threads %d: want 0 (all cores) or more", f.threads)
	}
	impls := []gemm.Impl{gemm.New(f.threads)}
	if k, ok := impls[0].(interface{ Kernel() string }); ok {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench gemm: Go path with the %s kernel\n", k.Kernel())
	}
	if f.reference {
		impls = append(impls, gemm.Reference{})
	}
	if ob, err := gemm.OpenBLAS(f.threads); err == nil {
		impls = append(impls, ob)
		if d, ok := ob.(interface {
			Library() string
			Core() string
		}); ok {
			fmt.Fprintf(cmd.ErrOrStderr(), "bench gemm: OpenBLAS %s, %s kernels\n", d.Library(), d.Core())
		}
	} else if errors.Is(err, gemm.ErrOpenBLASUnavailable) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench gemm: skipping OpenBLAS: %v\n", err)
	} else {
		return fmt.Errorf("bench gemm: %w", err)
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	for _, g := range impls {
		for _, s := range sizes {
			res := benchGemmResult{Impl: g.Name(), M: s[0], N: s[1], K: s[2], Threads: g.Threads()}
			res.GFLOPs = math.Round(timeGemm(g, s[0], s[1], s[2], f.repeat)*10) / 10
			if err := enc.Encode(res); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseGemmSizes parses a comma-separated list of N or MxNxK sizes.
func parseGemmSizes(s string) ([][3]int, error) {
	var sizes [][3]int
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		parts := strings.Split(strings.ToLower(item), "x")
		if len(parts) != 1 && len(parts) != 3 {
			return nil, fmt.Errorf("%q: want N or MxNxK", item)
		}
		var dims [3]int
		for i, p := range parts {
			v, err := strconv.Atoi(p)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("%q: want N or MxNxK with positive integers", item)
			}
			dims[i] = v
		}
		if len(parts) == 1 {
			dims[1], dims[2] = dims[0], dims[0]
		}
		m, n, k := float64(dims[0]), float64(dims[1]), float64(dims[2])
		if m*k+k*n+m*n > maxBenchGemmElems {
			return nil, fmt.Errorf("%q: the matrices would take more than %d GiB", item, maxBenchGemmElems*4>>30)
		}
		sizes = append(sizes, dims)
	}
	return sizes, nil
}

// timeGemm returns the GFLOP/s of g on an m×n×k product: one warm-up run,
// then the median of repeat timed runs.
func timeGemm(g gemm.Impl, m, n, k, repeat int) float64 {
	rng := rand.New(rand.NewPCG(uint64(m), uint64(n)<<32|uint64(k)))
	fill := func(s []float32) {
		for i := range s {
			s[i] = 2*rng.Float32() - 1
		}
	}
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	fill(a)
	fill(b)
	g.Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
	secs := make([]float64, repeat)
	for i := range secs {
		start := time.Now()
		g.Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		secs[i] = time.Since(start).Seconds()
	}
	return 2 * float64(m) * float64(n) * float64(k) / median(secs) / 1e9
}
