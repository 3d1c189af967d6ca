package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/engine/gemm"
	"github.com/memtrain/memtrain/internal/options"
)

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
--reference also gonum's pure-Go blas32 on one thread ("gonum"). Their timed
runs are interleaved, run i of each before run i+1 of any, so that a shared
machine's load falls on all alike; before each, a pause (OpenBLAS's idle
threads keep polling for a while after a call and would slow whatever ran
next) and one untimed run (so that waking idle threads is not what is
timed). A size is N for an N³ product or MxNxK.`,
		Example: `  memtrain bench gemm
  memtrain bench gemm --sizes 1024,4096x1024x384 --threads 2 --repeat 9
  OPENBLAS_CORETYPE=SkylakeX memtrain bench gemm --sizes 2048 --reference`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchGemm(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.sizes, "sizes", "512,1024,2048", "comma-separated sizes: N for N×N×N, or MxNxK")
	threadsFlag(fl, &f.threads, "threads for the Go kernels and OpenBLAS (default all cores)")
	options.IntRange(fl, &f.repeat, "repeat", 5, 1, maxBenchRuns, "", "timed runs a case; the median is reported")
	fl.BoolVar(&f.reference, "reference", false, "also time gonum's blas32 (one thread, slow)")
	return cmd
}

func runBenchGemm(cmd *cobra.Command, f benchGemmFlags) error {
	shapes, err := gemm.ParseShapes(f.sizes)
	if err != nil {
		return fmt.Errorf("bench gemm: --sizes: %w", err)
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
	var tick func()
	if errw := cmd.ErrOrStderr(); isTerminal(errw) {
		bar := newBar(errw, len(shapes)*f.repeat, "bench gemm", "runs")
		defer bar.Finish()
		tick = func() { bar.Add(1) }
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	// Each shape's implementations are timed in turn, run by run
	// (gemm.Compare), so their ratio holds on a loaded machine.
	for _, s := range shapes {
		for j, gf := range gemm.Compare(impls, s, f.repeat, tick) {
			g := impls[j]
			res := benchGemmResult{Impl: g.Name(), M: s.M, N: s.N, K: s.K, Threads: g.Threads(), GFLOPs: math.Round(gf*10) / 10}
			if err := enc.Encode(res); err != nil {
				return err
			}
		}
	}
	return nil
}
