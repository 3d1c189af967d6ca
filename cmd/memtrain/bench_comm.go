package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm/commbench"
	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
)

type benchCommFlags struct {
	ranks    string
	sizes    string
	ops      string
	iters    int
	oneGroup bool
	world    int
	device   string // write a perfmodel.Device here
	peak     float64
	eff      float64
}

func newBenchCommCmd() *cobra.Command {
	var f benchCommFlags
	cmd := &cobra.Command{
		Use:   "comm [--ranks 2,4,8] [--sizes 64K,...,64M] [--ops all-reduce,all-gather,reduce-scatter]",
		Short: "Measure collective bandwidth and latency (in process, or over MPI under mpirun)",
		Long: `comm times all-reduce, all-gather and reduce-scatter of float32 buffers on
groups of --ranks ranks and prints one JSON line a case, as nccl-tests measures
them: {"transport","op","ranks","groups","bytes","iters","time_us","algbw_gbs",
"busbw_gbs"}, where bytes is the full buffer (an all-gather's output, a
reduce-scatter's input), time_us the slowest rank's mean time a call, algbw
bytes ÷ time and busbw algbw × the ring factor (2(p−1)/p for an all-reduce,
(p−1)/p for the others): what each rank sends a second, the number to compare
with a link's bandwidth.

By default the ranks are goroutines of this process (the in-process
communicator of --parallel): a world of --world ranks (default the largest of
--ranks). Under mpirun, with a memtrain built with -tags mpi, the world is the
MPI job, one rank a process, and rank 0 prints. The world is cut into groups of
p consecutive ranks that all communicate at once, as the groups of a training
step do (--one-group: only the first, the others idle, as nccl-tests does).

Then, for each group size, a line with "op":"fit": bus bandwidth and latency
fitted to time = latency + bytes × ring factor ÷ busbw over all operations and
sizes (weighted by 1/time², so that small and large messages count alike), and
a readable summary on stderr. --device FILE writes these as a perfmodel device
(JSON) for ` + "`memtrain plan --device-json FILE`" + `, with --peak (GFLOP/s, e.g. from
` + "`memtrain bench gemm`" + `) and --efficiency (from ` + "`memtrain bench step`" + `).`,
		Example: `  memtrain bench comm
  memtrain bench comm --ranks 2,4 --sizes 1M,16M --ops all-reduce
  mpirun -np 8 memtrain bench comm --device cpu.json --peak 190 --efficiency 0.45`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchComm(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.ranks, "ranks", "2,4,8", "comma-separated group sizes")
	fl.StringVar(&f.sizes, "sizes", "64K,256K,1M,4M,16M,64M", "comma-separated buffer sizes in bytes (K, M, G or KiB, MiB, GiB: powers of 1024; KB, MB: of 1000)")
	fl.StringVar(&f.ops, "ops", "all-reduce,all-gather,reduce-scatter", "collectives to time")
	options.IntRange(fl, &f.iters, "iters", 0, 1, commbench.MaxIters, "automatic", "timed calls a case, after two warm-up calls (default: enough to move 256 MiB, 5 to 200)")
	fl.BoolVar(&f.oneGroup, "one-group", false, "time one group of each size while the other ranks wait")
	options.IntRange(fl, &f.world, "world", 0, 1, commbench.MaxRanks, "the largest of --ranks", "in-process ranks (default the largest of --ranks; under mpirun the job's size)")
	fl.StringVar(&f.device, "device", "", "write the measured device for 'memtrain plan --device-json' to this file")
	fl.Float64Var(&f.peak, "peak", 0, "with --device: the compute peak of one node, GFLOP/s (e.g. 'memtrain bench gemm''s, all cores)")
	fl.Float64Var(&f.eff, "efficiency", 0, "with --device: the fraction of --peak a training step reaches (e.g. 'memtrain bench step''s)")
	return cmd
}

// runBenchComm parses the flags, runs the measurement (commbench), and
// prints its JSON lines and summary; under MPI only rank 0 prints.
func runBenchComm(cmd *cobra.Command, f benchCommFlags) error {
	ranks, err := parseCounts(f.ranks)
	if err != nil {
		return fmt.Errorf("bench comm: --ranks: %w", err)
	}
	sizes, err := parseByteSizes(f.sizes)
	if err != nil {
		return fmt.Errorf("bench comm: --sizes: %w", err)
	}
	ops, err := units.SplitList(f.ops)
	if err != nil {
		return fmt.Errorf("bench comm: --ops: %w", err)
	}
	if len(ops) == 0 {
		return errors.New("bench comm: --ops: no collective (want all-reduce, all-gather or reduce-scatter)")
	}
	for _, o := range ops {
		if err := commbench.CheckOp(o); err != nil {
			return fmt.Errorf("bench comm: --ops: %w", err)
		}
	}
	switch {
	case f.device == "" && (f.peak != 0 || f.eff != 0):
		return errors.New("bench comm: --peak and --efficiency go with --device (the device file they describe)")
	case f.device != "" && !(f.peak > 0 && !math.IsInf(f.peak, 1)):
		return fmt.Errorf("bench comm: --device needs --peak, a node's compute peak in GFLOP/s (got --peak %v)", f.peak)
	case f.device != "" && !(f.eff > 0 && f.eff <= 1):
		return fmt.Errorf("bench comm: --device needs --efficiency in (0, 1], the fraction of --peak a step reaches (got --efficiency %v)", f.eff)
	}
	b, err := commbench.New(commbench.Options{Ranks: ranks, Sizes: sizes, Ops: ops, Iters: f.iters, OneGroup: f.oneGroup, World: f.world})
	if errors.Is(err, commbench.ErrNoGroup) {
		return fmt.Errorf("bench comm: --ranks %s: %w", f.ranks, err)
	} else if err != nil {
		return fmt.Errorf("bench comm: %w", err)
	}
	// The in-process ranks and their buffers fit the host before any is
	// made.
	if need, free := b.HostBytes(), hostFree(); free >= 0 && need > free {
		inProcess := b.World
		if b.Transport == commbench.MPI {
			inProcess = 1
		}
		return fmt.Errorf("bench comm: %d ranks in this process with buffers of up to %s need about %s of host memory, but %s is free (want a smaller --world or --ranks, or smaller --sizes)",
			inProcess, units.FormatBytes(slices.Max(sizes)), engine.FormatNeed(need), units.FormatBytes(free))
	}
	for _, p := range b.Skipped {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench comm: skipping groups of %d: the world has %d ranks\n", p, b.World)
	}
	results, fits, err := b.Run()
	if err != nil {
		return fmt.Errorf("bench comm: %w", err)
	}
	if results == nil {
		return nil // an MPI rank other than 0
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	for _, fit := range fits {
		if err := enc.Encode(fit); err != nil {
			return err
		}
	}
	printBenchCommSummary(cmd.ErrOrStderr(), b.Transport, b.World, fits)
	if f.device != "" {
		dev, err := commbench.MeasuredDevice(results, fits, b.World, f.peak*1e9, f.eff)
		if err != nil {
			return fmt.Errorf("bench comm: --device: %w", err)
		}
		raw, err := json.MarshalIndent(dev, "", "  ")
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(f.device, append(raw, '\n')); err != nil {
			return fmt.Errorf("bench comm: --device: %w", err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "bench comm: wrote %s (memtrain plan --device-json %s)\n", f.device, f.device)
	}
	return nil
}

func printBenchCommSummary(w io.Writer, transport string, world int, fits []commbench.Fit) {
	where := "in-process ranks (goroutines)"
	if transport == commbench.MPI {
		where = "MPI ranks (one a process)"
	}
	fmt.Fprintf(w, "bench comm: %d %s; time a call ≈ latency + bytes × ring factor ÷ bus bandwidth\n", world, where)
	for _, f := range fits {
		fmt.Fprintf(w, "  groups of %d (%d at once): bus bandwidth %.2f GB/s a rank (%.2f at the largest size), latency %.1f µs a call\n",
			f.Ranks, f.Groups, f.BusBW, f.LargestBusBW, f.LatencyUS)
	}
}

// parseCounts parses a comma-separated list of group sizes, 1 to
// commbench.MaxRanks.
func parseCounts(s string) ([]int, error) {
	ns, err := units.ParseInts(s, 1, commbench.MaxRanks)
	out := make([]int, len(ns))
	for i, n := range ns {
		out[i] = int(n)
	}
	return out, err
}

// parseByteSizes parses a comma-separated list of sizes such as
// "64K,1M,4096" (units.ParseBytes: K, M, G are powers of 1024), each a
// positive multiple of 4 bytes (float32 elements) of at most 2 GiB − 1.
func parseByteSizes(s string) ([]int64, error) {
	items, err := units.SplitList(s)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, errors.New("no size (want sizes such as 4096, 64K or 16M, comma-separated)")
	}
	var out []int64
	for _, item := range items {
		n, err := units.ParseBytes(item)
		if err != nil || n < 1 || n > math.MaxInt32 {
			return nil, fmt.Errorf("%q: want a positive size below 2 GiB such as 4096, 64K or 16M", item)
		}
		if n%4 != 0 {
			return nil, fmt.Errorf("%q: not a whole number of float32 elements", item)
		}
		out = append(out, n)
	}
	return out, nil
}
