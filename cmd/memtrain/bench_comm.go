package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/local"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/perfmodel"
	"github.com/memtrain/memtrain/internal/atomicfile"
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

// benchCommResult is the JSON line `bench comm` prints for each case.
// Sizes and bandwidths follow nccl-tests: Bytes is the full buffer (an
// all-gather's output, a reduce-scatter's input), AlgBW = Bytes ÷ time,
// BusBW = AlgBW × the ring factor (2(p−1)/p for an all-reduce, (p−1)/p
// for the others): the rate at which each rank sends, comparable across
// operations and group sizes with the link's bandwidth.
type benchCommResult struct {
	Transport string  `json:"transport"` // "local" (in-process) or "mpi"
	Op        string  `json:"op"`
	Ranks     int     `json:"ranks"`  // p, the group's size
	Groups    int     `json:"groups"` // groups of p ranks communicating at once
	Bytes     int64   `json:"bytes"`
	Iters     int     `json:"iters"`
	TimeUS    float64 `json:"time_us"` // per call: the slowest rank's mean
	AlgBW     float64 `json:"algbw_gbs"`
	BusBW     float64 `json:"busbw_gbs"`
}

// benchCommFit is the summary line of one group size: time per call ≈
// LatencyUS + Bytes × ring factor ÷ BusBW, fitted over every operation and
// size.
type benchCommFit struct {
	Transport string  `json:"transport"`
	Op        string  `json:"op"` // "fit"
	Ranks     int     `json:"ranks"`
	Groups    int     `json:"groups"`
	BusBW     float64 `json:"busbw_gbs"`
	LatencyUS float64 `json:"latency_us"`
	// LargestBusBW is the median bus bandwidth of the operations at the
	// largest size, the number nccl-tests would quote.
	LargestBusBW float64 `json:"largest_busbw_gbs"`
}

var benchCommOps = map[string]comm.Op{"all-reduce": comm.AllReduce, "all-gather": comm.AllGather, "reduce-scatter": comm.ReduceScatter}

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
	fl.IntVar(&f.iters, "iters", 0, "timed calls a case, after two warm-up calls (default: enough to move 256 MiB, 5 to 200)")
	fl.BoolVar(&f.oneGroup, "one-group", false, "time one group of each size while the other ranks wait")
	fl.IntVar(&f.world, "world", 0, "in-process ranks (default the largest of --ranks; under mpirun the job's size)")
	fl.StringVar(&f.device, "device", "", "write the measured device for `memtrain plan --device-json` to this file")
	fl.Float64Var(&f.peak, "peak", 0, "with --device: the compute peak of one node, GFLOP/s (e.g. `memtrain bench gemm`'s, all cores)")
	fl.Float64Var(&f.eff, "efficiency", 0, "with --device: the fraction of --peak a training step reaches (e.g. `memtrain bench step`'s)")
	return cmd
}

// benchCommCase is one measurement to make.
type benchCommCase struct {
	op    string
	ranks int
	bytes int64
	iters int
}

func runBenchComm(cmd *cobra.Command, f benchCommFlags) error {
	ranks, err := parseCounts(f.ranks)
	if err != nil {
		return fmt.Errorf("bench comm: --ranks: %w", err)
	}
	sizes, err := parseByteSizes(f.sizes)
	if err != nil {
		return fmt.Errorf("bench comm: --sizes: %w", err)
	}
	var ops []string
	for _, o := range strings.Split(f.ops, ",") {
		o = strings.TrimSpace(o)
		if _, ok := benchCommOps[o]; !ok {
			return fmt.Errorf("bench comm: --ops: unknown %q (want all-reduce, all-gather or reduce-scatter)", o)
		}
		ops = append(ops, o)
	}
	switch {
	case f.iters < 0:
		return fmt.Errorf("bench comm: --iters %d: want 0 (automatic) or more", f.iters)
	case f.device != "" && (f.peak <= 0 || f.eff <= 0 || f.eff > 1):
		return errors.New("bench comm: --device needs --peak (GFLOP/s) and --efficiency in (0, 1]")
	}
	procs, err := launch.Procs()
	if err != nil {
		return err
	}
	transport, worldSize := "local", f.world
	if procs > 1 {
		transport, worldSize = "mpi", procs
	} else if worldSize == 0 {
		worldSize = slices.Max(ranks)
	}
	var cases []benchCommCase
	for _, p := range ranks {
		if p > worldSize {
			fmt.Fprintf(cmd.ErrOrStderr(), "bench comm: skipping groups of %d: the world has %d ranks\n", p, worldSize)
			continue
		}
		for _, op := range ops {
			for _, b := range sizes {
				it := f.iters
				if it == 0 {
					it = int(min(200, max(5, (256<<20)/b)))
				}
				cases = append(cases, benchCommCase{op: op, ranks: p, bytes: b, iters: it})
			}
		}
	}
	if len(cases) == 0 {
		return fmt.Errorf("bench comm: no group of --ranks %s fits in a world of %d", f.ranks, worldSize)
	}

	var results []benchCommResult
	if transport == "mpi" {
		world, err := launch.MPIWorld(procs)
		if err != nil {
			return fmt.Errorf("bench comm: %w", err)
		}
		results, err = benchCommRank(world, cases, f.oneGroup)
		if err != nil {
			return fmt.Errorf("bench comm: rank %d of %d: %w", world.Rank(), world.Size(), err)
		}
		if err := world.Close(); err != nil {
			return fmt.Errorf("bench comm: %w", err)
		}
		if world.Rank() != 0 {
			return nil
		}
	} else {
		if _, _, err := comm.EnvTimeout(); err != nil {
			return err
		}
		worlds := local.New(worldSize)
		errs := make([]error, worldSize)
		var wg sync.WaitGroup
		for r, w := range worlds {
			wg.Go(func() {
				res, err := benchCommRank(w, cases, f.oneGroup)
				if r == 0 {
					results = res
				}
				errs[r] = err
				w.Close()
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("bench comm: %w", err)
		}
	}
	for i := range results {
		results[i].Transport = transport
	}
	fits := fitBenchComm(results)
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
	printBenchCommSummary(cmd.ErrOrStderr(), transport, worldSize, fits)
	if f.device != "" {
		dev, err := measuredDevice(results, fits, worldSize, f.peak*1e9, f.eff)
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

// benchCommRank runs every case as one rank of world and returns, on
// world rank 0, the results. Every rank runs the same calls in the same
// order: the splits, a barrier before each case (so that the groups start
// together), and an all-reduce of every rank's time after it.
func benchCommRank(world comm.Comm, cases []benchCommCase, oneGroup bool) ([]benchCommResult, error) {
	b := cpu.New(cpu.Options{Threads: 1})
	W, rank := world.Size(), world.Rank()
	groups := map[int]comm.Comm{}
	defer func() {
		for _, g := range groups {
			if g != nil {
				g.Close()
			}
		}
	}()
	times := b.Alloc(engine.F32, W)
	defer b.Free(times)
	var out []benchCommResult
	for _, c := range cases {
		p := c.ranks
		g, ok := groups[p]
		nGroups := W / p
		if oneGroup {
			nGroups = 1
		}
		if !ok {
			color := rank / p
			if color >= nGroups {
				color = comm.Undefined
			}
			var err error
			if g, err = world.Split(fmt.Sprintf("bench-%d", p), color, rank); err != nil {
				return nil, err
			}
			groups[p] = g
		}
		var secs float64
		if err := world.Barrier(); err != nil {
			return nil, err
		}
		if g != nil {
			var err error
			if secs, err = timeCollective(b, g, c); err != nil {
				return nil, err
			}
		}
		// The slowest rank's time: every rank adds its own into its slot.
		host := make([]float32, W)
		host[rank] = float32(secs)
		b.Upload(times, host)
		if err := world.AllReduce(times); err != nil {
			return nil, err
		}
		b.Download(host, times)
		if rank != 0 {
			continue
		}
		t := float64(slices.Max(host))
		algbw := float64(c.bytes) / t / 1e9
		out = append(out, benchCommResult{
			Op: c.op, Ranks: p, Groups: nGroups, Bytes: c.bytes, Iters: c.iters,
			TimeUS: round3(t * 1e6), AlgBW: round3(algbw),
			BusBW: round3(algbw * comm.SentFactor(benchCommOps[c.op], p)),
		})
	}
	return out, nil
}

// timeCollective times c.iters calls of c's collective on g after two
// warm-up calls (which fault in the buffers' pages), and returns the mean
// seconds a call.
func timeCollective(b *cpu.Backend, g comm.Comm, c benchCommCase) (float64, error) {
	n := int(c.bytes / 4)
	full := b.Alloc(engine.F32, n)
	defer b.Free(full)
	// This rank's chunk, in its own buffer (not in place): what a
	// training step does with gathered weights and scattered gradients.
	_, l := comm.Chunk(n, g.Size(), g.Rank())
	chunk := b.Alloc(engine.F32, max(l, 1))
	defer b.Free(chunk)
	part := chunk.View(0, l)
	call := func() error {
		switch benchCommOps[c.op] {
		case comm.AllReduce:
			return g.AllReduce(full)
		case comm.AllGather:
			return g.AllGather(full, part)
		default:
			return g.ReduceScatter(part, full)
		}
	}
	for range 2 {
		if err := call(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for range c.iters {
		if err := call(); err != nil {
			return 0, err
		}
	}
	return time.Since(start).Seconds() / float64(c.iters), nil
}

// fitBenchComm fits, per group size, time = α + sent/β over every
// operation and size, where sent = bytes × ring factor, by least squares
// weighted by 1/time² (relative errors, so that microsecond and
// millisecond calls count alike). Without a rising line it falls back
// to the largest size's bus bandwidth and the fastest call.
func fitBenchComm(results []benchCommResult) []benchCommFit {
	var fits []benchCommFit
	byRanks := map[int][]benchCommResult{}
	var order []int
	for _, r := range results {
		if _, ok := byRanks[r.Ranks]; !ok {
			order = append(order, r.Ranks)
		}
		byRanks[r.Ranks] = append(byRanks[r.Ranks], r)
	}
	for _, p := range order {
		rs := byRanks[p]
		var sw, sx, sy, sxx, sxy float64
		largest := int64(0)
		for _, r := range rs {
			x := float64(r.Bytes) * comm.SentFactor(benchCommOps[r.Op], p) // bytes sent
			y := r.TimeUS * 1e-6
			w := 1 / (y * y)
			sw += w
			sx += w * x
			sy += w * y
			sxx += w * x * x
			sxy += w * x * y
			largest = max(largest, r.Bytes)
		}
		fit := benchCommFit{Transport: rs[0].Transport, Op: "fit", Ranks: p, Groups: rs[0].Groups}
		var top []float64
		fastest := math.Inf(1)
		for _, r := range rs {
			if r.Bytes == largest {
				top = append(top, r.BusBW)
			}
			fastest = min(fastest, r.TimeUS)
		}
		fit.LargestBusBW = round3(median(top))
		den := sw*sxx - sx*sx
		slope := 0.0
		if den > 0 {
			slope = (sw*sxy - sx*sy) / den
		}
		if slope > 0 {
			fit.BusBW = round3(1 / slope / 1e9)
			fit.LatencyUS = round3(max(0, (sy-slope*sx)/sw) * 1e6)
		} else {
			// Times that do not grow with the size (one size, or sizes
			// so small that noise decides): no line to fit. The largest
			// size's bandwidth and the fastest call are the best words.
			fit.BusBW, fit.LatencyUS = fit.LargestBusBW, fastest
		}
		fits = append(fits, fit)
	}
	return fits
}

func printBenchCommSummary(w io.Writer, transport string, world int, fits []benchCommFit) {
	where := "in-process ranks (goroutines)"
	if transport == "mpi" {
		where = "MPI ranks (one a process)"
	}
	fmt.Fprintf(w, "bench comm: %d %s; time a call ≈ latency + bytes × ring factor ÷ bus bandwidth\n", world, where)
	for _, f := range fits {
		fmt.Fprintf(w, "  groups of %d (%d at once): bus bandwidth %.2f GB/s a rank (%.2f at the largest size), latency %.1f µs a call\n",
			f.Ranks, f.Groups, f.BusBW, f.LargestBusBW, f.LatencyUS)
	}
}

// measuredDevice is this machine as the performance model sees it
// (perfmodel.MeasuredDevice), from the fits of a world of `world` ranks
// on this node: the bandwidth and latency of the largest group measured
// with every group busy, the situation of a training step, in which all
// ranks communicate at once.
func measuredDevice(results []benchCommResult, fits []benchCommFit, world int, peak, eff float64) (perfmodel.Device, error) {
	best := fits[0]
	for _, f := range fits {
		if f.Ranks > best.Ranks {
			best = f
		}
	}
	mem := totalMemory()
	if mem <= 0 {
		return perfmodel.Device{}, errors.New("cannot read this machine's memory size (/proc/meminfo)")
	}
	var timings []perfmodel.Timing
	for _, r := range results {
		timings = append(timings, perfmodel.Timing{Op: r.Op, Ranks: r.Ranks, Bytes: r.Bytes, Seconds: r.TimeUS / 1e6})
	}
	return perfmodel.MeasuredDevice(perfmodel.Measured{
		Name:      fmt.Sprintf("cpu-%d", world),
		PeakFLOPs: peak, Efficiency: eff,
		BusBandwidth: best.BusBW * 1e9, Latency: best.LatencyUS / 1e6, Ranks: world,
		MemoryBytes: mem, Timings: timings,
	})
}

// totalMemory is the machine's memory in bytes (Linux's MemTotal), or 0.
func totalMemory() int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// parseCounts parses a comma-separated list of positive integers.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(item))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive integers", item)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseByteSizes parses a comma-separated list of sizes such as
// "64K,1M,4096" (units.ParseBytes: K, M, G are powers of 1024), each a
// positive multiple of 4 bytes (float32 elements) of at most 2 GiB − 1.
func parseByteSizes(s string) ([]int64, error) {
	var out []int64
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
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

func round3(x float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}
