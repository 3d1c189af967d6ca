package main

import (
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/engine/bench"
)

// newBenchCmd returns `memtrain bench`, which groups the speed
// measurements. Each subcommand prints one JSON object a line on stdout.
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure kernel and training-step speed",
		Long: `bench measures how fast this machine runs memtrain's kernels. Each subcommand
prints its results as JSON lines on stdout, one object a measurement, for
scripts to collect.`,
		Args: cobra.NoArgs,
	}
	// Each measurement registers here.
	cmd.AddCommand(
		newBenchGemmCmd(),
		newBenchStepCmd(), newBenchDecodeCmd(), // bench_step.go: a full training step
		newBenchCommCmd(), // bench_comm.go: collectives, in process or over MPI
	)
	return cmd
}

// Bounds of the benchmarks' counts: each timed run (or step) keeps its
// time, and each rank of bench comm is a goroutine with its buffers.
const (
	maxBenchRuns  = bench.MaxRuns
	maxBenchRanks = 4096
)
