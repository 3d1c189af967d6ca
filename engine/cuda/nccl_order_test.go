package cuda

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/numtest"
)

// NCCL's rule for several communicators ("Using multiple NCCL
// communicators concurrently"): a collective's kernel holds its GPU until
// every peer has joined it, so the ranks must issue the operations of all
// their communicators in one consistent order, or two ranks end up
// waiting in different communicators for each other. The fake NCCL logs
// every rank's collectives as they are issued; these tests check a grid's
// training steps against the rule.

// ncclOp is one collective of the fake NCCL's log.
type ncclOp struct {
	Comm       uint64 // the communicator: one number on all its ranks
	Size, Rank int    // its number of ranks and this rank's place in it
	Op         string // "all-reduce", "reduce-scatter", "all-gather", "broadcast", "split"
	Count      int    // elements (per rank for reduce-scatter and all-gather, as NCCL counts)
	DType      int    // ncclDataType_t
	Root       int
	Group      uint64 // the rank's NCCL group it was issued in, 0 outside one
	Stream     uint64 // the stream it was issued on (0 for a split), on this rank
}

func (o ncclOp) String() string {
	s := fmt.Sprintf("%s of %d (type %d) on communicator %d", o.Op, o.Count, o.DType, o.Comm)
	if o.Op == "broadcast" {
		s += fmt.Sprintf(" from %d", o.Root)
	}
	return s
}

// ncclLog reads the fake NCCL's log of issued collectives.
type ncclLog struct {
	start func()
	read  func(dev int32, buf *byte, n uint64) uint64
}

// fakeNCCLLog binds the fake NCCL's log functions.
func fakeNCCLLog(t *testing.T) *ncclLog {
	dir := fakeCUDA(t)
	// The fake is one library under four names: this is the handle the
	// backend's NCCL bindings use.
	h, err := dlopen(filepath.Join(dir, "libnccl.so.2"))
	if err != nil {
		t.Fatal(err)
	}
	l := &ncclLog{}
	for name, fn := range map[string]any{"fakecuda_nccl_log_start": &l.start, "fakecuda_nccl_log_read": &l.read} {
		sym, err := dlsym(h, name)
		if err != nil {
			t.Fatal(err)
		}
		bind(fn, sym)
	}
	return l
}

// sequence returns device dev's collectives since start, in issue order.
func (l *ncclLog) sequence(t *testing.T, dev int) []ncclOp {
	t.Helper()
	n := l.read(int32(dev), nil, 0)
	buf := make([]byte, n+1)
	buf = buf[:l.read(int32(dev), &buf[0], uint64(len(buf)))]
	var ops []ncclOp
	for _, line := range strings.Split(strings.TrimSuffix(string(buf), "\n"), "\n") {
		if line == "" {
			continue
		}
		var o ncclOp
		if _, err := fmt.Sscan(line, &o.Comm, &o.Size, &o.Rank, &o.Op, &o.Count, &o.DType, &o.Root, &o.Group, &o.Stream); err != nil {
			t.Fatalf("device %d: log line %q: %v", dev, line, err)
		}
		ops = append(ops, o)
	}
	return ops
}

// checkNCCLOrder reports the first way in which the ranks' sequences of
// collectives, seqs[r] being rank r's in issue order across all its
// communicators, break NCCL's rules, or nil:
//
//   - on each communicator, all its ranks issue the same operations (op,
//     count, type, root) in the same order, grouped the same way (an
//     operation in the same NCCL group as the one before it on the
//     communicator, or not), and as many ranks as it has take part;
//   - for every two communicators two ranks share, their operations
//     interleave the same way on both ranks;
//   - and, what the pairwise rule alone misses when three or more
//     communicators form a ring, some single order of all the
//     operations agrees with every rank's: the graph whose edges join
//     each rank's consecutive operations has no cycle.
func checkNCCLOrder(seqs [][]ncclOp) error {
	type step struct {
		op     ncclOp
		joined bool // in the same group as the communicator's previous operation on this rank
	}
	// The sequence of each communicator on each of its ranks.
	perComm := map[uint64]map[int][]step{}
	var comms []uint64
	for r, seq := range seqs {
		last := map[uint64]uint64{} // the group of the communicator's last operation here
		for _, o := range seq {
			byRank := perComm[o.Comm]
			if byRank == nil {
				byRank = map[int][]step{}
				perComm[o.Comm] = byRank
				comms = append(comms, o.Comm)
			}
			g, seen := last[o.Comm]
			byRank[r] = append(byRank[r], step{o, seen && o.Group != 0 && o.Group == g})
			last[o.Comm] = o.Group
		}
	}
	slices.Sort(comms)
	for _, c := range comms {
		byRank := perComm[c]
		ranks := sortedKeys(byRank)
		first := byRank[ranks[0]]
		places := map[int]int{} // the communicator's rank → the rank in seqs
		for _, r := range ranks {
			o := byRank[r][0].op
			if o.Size != first[0].op.Size {
				return fmt.Errorf("communicator %d: rank %d says it has %d ranks, rank %d says %d", c, ranks[0], first[0].op.Size, r, o.Size)
			}
			if q, dup := places[o.Rank]; dup {
				return fmt.Errorf("communicator %d: ranks %d and %d are both its rank %d", c, q, r, o.Rank)
			}
			places[o.Rank] = r
		}
		if len(ranks) != first[0].op.Size {
			return fmt.Errorf("communicator %d of %d ranks: only ranks %v issued operations on it", c, first[0].op.Size, ranks)
		}
		for _, r := range ranks[1:] {
			seq := byRank[r]
			for i := range max(len(first), len(seq)) {
				switch {
				case i >= len(seq):
					return fmt.Errorf("communicator %d: rank %d issued %d operations, rank %d only %d: its next is %v", c, ranks[0], len(first), r, len(seq), first[i].op)
				case i >= len(first):
					return fmt.Errorf("communicator %d: rank %d issued %d operations, rank %d only %d: its next is %v", c, r, len(seq), ranks[0], len(first), seq[i].op)
				}
				a, b := first[i], seq[i]
				a.op.Rank, b.op.Rank, a.op.Group, b.op.Group, a.op.Stream, b.op.Stream = 0, 0, 0, 0, 0, 0
				if a != b {
					return fmt.Errorf("communicator %d, operation %d: rank %d issued %v (grouped with the one before: %t), rank %d %v (%t)", c, i+1, ranks[0], a.op, a.joined, r, b.op, b.joined)
				}
			}
		}
	}

	// Two communicators on two ranks: the same interleaving.
	for i, a := range comms {
		for _, b := range comms[i+1:] {
			var ref []uint64
			refRank := -1
			for r, seq := range seqs {
				if perComm[a][r] == nil || perComm[b][r] == nil {
					continue
				}
				var mix []uint64
				for _, o := range seq {
					if o.Comm == a || o.Comm == b {
						mix = append(mix, o.Comm)
					}
				}
				if refRank < 0 {
					ref, refRank = mix, r
					continue
				}
				if k := firstDifference(ref, mix); k >= 0 {
					return fmt.Errorf("communicators %d and %d: ranks %d and %d order their operations differently: operation %d of the two is on %d on rank %d, on %d on rank %d",
						a, b, refRank, r, k+1, ref[k], refRank, mix[k], r)
				}
			}
		}
	}

	// One order for all: a topological sort of the operations, each
	// named by its communicator and its index there.
	type node struct {
		comm uint64
		i    int
	}
	next := map[node][]node{}
	indeg := map[node]int{}
	for _, seq := range seqs {
		count := map[uint64]int{}
		var prev *node
		for _, o := range seq {
			n := node{o.Comm, count[o.Comm]}
			count[o.Comm]++
			if _, ok := indeg[n]; !ok {
				indeg[n] = 0
			}
			if prev != nil {
				next[*prev] = append(next[*prev], n)
				indeg[n]++
			}
			prev = &n
		}
	}
	var ready []node
	for n, d := range indeg {
		if d == 0 {
			ready = append(ready, n)
		}
	}
	done := 0
	for len(ready) > 0 {
		n := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		done++
		for _, m := range next[n] {
			if indeg[m]--; indeg[m] == 0 {
				ready = append(ready, m)
			}
		}
	}
	if done != len(indeg) {
		var stuck []string
		for n, d := range indeg {
			if d > 0 {
				stuck = append(stuck, fmt.Sprintf("operation %d on communicator %d", n.i+1, n.comm))
			}
		}
		slices.Sort(stuck)
		return fmt.Errorf("no single order of the collectives agrees with every rank's: they wait for each other in a cycle through %d operations (%s)", len(stuck), strings.Join(stuck, ", "))
	}
	return nil
}

// checkNCCLStreams checks that each rank issued all the collectives of a
// communicator on one stream, a stream of that communicator alone: with
// two streams, two collectives of a communicator could run at once.
func checkNCCLStreams(seqs [][]ncclOp) error {
	for r, seq := range seqs {
		streamOf := map[uint64]uint64{} // communicator → stream
		commOf := map[uint64]uint64{}   // stream → communicator
		for _, o := range seq {
			if o.Op == "split" {
				continue
			}
			if s, ok := streamOf[o.Comm]; ok && s != o.Stream {
				return fmt.Errorf("rank %d issued collectives of communicator %d on two streams, %#x and %#x", r, o.Comm, s, o.Stream)
			}
			if c, ok := commOf[o.Stream]; ok && c != o.Comm {
				return fmt.Errorf("rank %d issued collectives of communicators %d and %d on one stream %#x", r, c, o.Comm, o.Stream)
			}
			streamOf[o.Comm], commOf[o.Stream] = o.Stream, o.Comm
		}
	}
	return nil
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// firstDifference is the first index where a and b differ (one ending
// counts), or -1.
func firstDifference(a, b []uint64) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestCheckNCCLOrder checks the checker on sequences that keep or break
// the rules.
func TestCheckNCCLOrder(t *testing.T) {
	// op is an all-reduce of count elements by rank (of size) on comm.
	op := func(comm uint64, size, rank, count int) ncclOp {
		return ncclOp{Comm: comm, Size: size, Rank: rank, Op: "all-reduce", Count: count, DType: 7}
	}
	grouped := func(o ncclOp, g uint64) ncclOp { o.Group = g; return o }
	// A is ranks 0 and 1; B ranks 0 and 1 too; C ranks 1 and 2; D ranks
	// 0 and 2.
	const A, B, C, D = 1, 2, 3, 4
	for _, c := range []struct {
		name string
		seqs [][]ncclOp
		err  string // a part of the error; "" when the sequences keep the rules
	}{
		{"one communicator", [][]ncclOp{
			{op(A, 2, 0, 8), op(A, 2, 0, 4)},
			{op(A, 2, 1, 8), op(A, 2, 1, 4)},
		}, ""},
		{"two communicators, the same order", [][]ncclOp{
			{op(A, 2, 0, 8), op(B, 2, 0, 3), op(A, 2, 0, 4)},
			{op(A, 2, 1, 8), op(B, 2, 1, 3), op(A, 2, 1, 4)},
		}, ""},
		{"groups alike", [][]ncclOp{
			{grouped(op(A, 2, 0, 8), 1), grouped(op(A, 2, 0, 4), 1), op(A, 2, 0, 2)},
			{grouped(op(A, 2, 1, 8), 7), grouped(op(A, 2, 1, 4), 7), op(A, 2, 1, 2)},
		}, ""},
		{"communicators not shared may interleave freely", [][]ncclOp{
			{op(A, 2, 0, 8), op(D, 2, 0, 5)},
			{op(C, 2, 0, 6), op(A, 2, 1, 8)},
			{op(C, 2, 1, 6), op(D, 2, 1, 5)},
		}, ""},
		{"different counts", [][]ncclOp{
			{op(A, 2, 0, 8), op(A, 2, 0, 4)},
			{op(A, 2, 1, 4), op(A, 2, 1, 8)},
		}, "operation 1: rank 0 issued all-reduce of 8"},
		{"different operations", [][]ncclOp{
			{op(A, 2, 0, 8)},
			{{Comm: A, Size: 2, Rank: 1, Op: "all-gather", Count: 8, DType: 7}},
		}, "rank 1 all-gather of 8"},
		{"different roots", [][]ncclOp{
			{{Comm: A, Size: 2, Rank: 0, Op: "broadcast", Count: 8, DType: 7, Root: 0}},
			{{Comm: A, Size: 2, Rank: 1, Op: "broadcast", Count: 8, DType: 7, Root: 1}},
		}, "from 1"},
		{"one missing", [][]ncclOp{
			{op(A, 2, 0, 8), op(A, 2, 0, 4)},
			{op(A, 2, 1, 8)},
		}, "rank 0 issued 2 operations, rank 1 only 1"},
		{"a rank absent", [][]ncclOp{
			{op(A, 2, 0, 8)},
			{op(B, 2, 1, 8)},
		}, "only ranks [0] issued"},
		{"two ranks in one place", [][]ncclOp{
			{op(A, 2, 0, 8)},
			{op(A, 2, 0, 8)},
		}, "are both its rank 0"},
		{"grouped differently", [][]ncclOp{
			{grouped(op(A, 2, 0, 8), 1), grouped(op(A, 2, 0, 4), 1)},
			{grouped(op(A, 2, 1, 8), 1), grouped(op(A, 2, 1, 4), 2)},
		}, "operation 2"},
		{"two communicators swapped", [][]ncclOp{
			{op(A, 2, 0, 8), op(B, 2, 0, 3)},
			{op(B, 2, 1, 3), op(A, 2, 1, 8)},
		}, "communicators 1 and 2: ranks 0 and 1 order their operations differently"},
		{"a reordered bucket among others", [][]ncclOp{
			{op(A, 2, 0, 8), op(B, 2, 0, 3), op(A, 2, 0, 4), op(B, 2, 0, 1)},
			{op(A, 2, 1, 8), op(A, 2, 1, 4), op(B, 2, 1, 3), op(B, 2, 1, 1)},
		}, "operation 2 of the two is on 2 on rank 0, on 1 on rank 1"},
		{"three communicators in a ring", [][]ncclOp{
			{op(D, 2, 0, 1), op(A, 2, 0, 2)},
			{op(A, 2, 1, 2), op(C, 2, 0, 3)},
			{op(C, 2, 1, 3), op(D, 2, 1, 1)},
		}, "cycle through 3 operations"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkNCCLOrder(c.seqs)
			switch {
			case c.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.err != "" && err == nil:
				t.Errorf("no error, want one with %q", c.err)
			case c.err != "" && !strings.Contains(err.Error(), c.err):
				t.Errorf("error %q, want one with %q", err, c.err)
			}
		})
	}
}

// TestCheckNCCLStreams checks the stream check.
func TestCheckNCCLStreams(t *testing.T) {
	op := func(comm, stream uint64) ncclOp { return ncclOp{Comm: comm, Op: "all-reduce", Stream: stream} }
	for _, c := range []struct {
		name string
		seq  []ncclOp
		ok   bool
	}{
		{"a stream per communicator", []ncclOp{op(1, 10), op(2, 20), op(1, 10), {Comm: 3, Op: "split"}, op(3, 30)}, true},
		{"a communicator on two streams", []ncclOp{op(1, 10), op(1, 20)}, false},
		{"two communicators on one stream", []ncclOp{op(1, 10), op(2, 10)}, false},
	} {
		if err := checkNCCLStreams([][]ncclOp{c.seq}); (err == nil) != c.ok {
			t.Errorf("%s: error %v", c.name, err)
		}
	}
}

// TestNCCLOrderEmulated trains two steps of the small Llama on grids of
// four fake GPUs, with every overlap on and gradient buckets small enough
// that a group's gradients take several, logs every rank's collectives
// from the splits on, and checks them with checkNCCLOrder. The losses
// must still match one CPU rank's. Each grid runs both schedules of the
// buckets: issued during the last micro-batch's backward (the default),
// where they interleave with the backward's collectives on the other
// groups, and after it (llama.Options.ReduceAfterBackward), where each
// step's buckets follow each other.
func TestNCCLOrderEmulated(t *testing.T) {
	log := fakeNCCLLog(t)
	cfg := gridConfig()
	weights := checkpoints.RandomWeights(cfg, 5)
	batches := gridBatches(cfg)[:2]
	want, err := gridTrain(cpu.New(cpu.Options{Threads: 1}), cfg, weights, batches, nil)
	if err != nil {
		t.Fatal(err)
	}
	backends := make([]*Backend, 4)
	for i := range backends {
		backends[i] = newFake(t, i, GemmF32)
	}
	// 4 KiB buckets: the largest gradient of gridConfig is 64×32 floats,
	// 8 KiB, so most buckets close after one or two matrices.
	const bucket = 4 << 10
	for _, c := range []struct {
		shape comm.Grid
		after bool
	}{
		{comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, false}, {comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, true},
		{comm.Grid{Data: 2, X: 2, Y: 1, Z: 1}, false}, {comm.Grid{Data: 2, X: 2, Y: 1, Z: 1}, true},
		{comm.Grid{Data: 2, X: 1, Y: 2, Z: 1}, false},
		{comm.Grid{Data: 1, X: 2, Y: 2, Z: 1}, false},
	} {
		shape := c.shape
		t.Run(fmt.Sprintf("dp=%d,x=%d,y=%d,z=%d,after=%t", shape.Data, shape.X, shape.Y, shape.Z, c.after), func(t *testing.T) {
			log.start()
			worlds, err := NewNCCLGroup(backends)
			if err != nil {
				t.Fatal(err)
			}
			got := make([][]finetune.StepResult, len(backends))
			err = parallel.LaunchWorlds(worlds, shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
				res, err := gridTrainWith(backends[g.Rank()], cfg, weights, batches, llama.Options{Parallel: g, GradientBucketBytes: bucket, ReduceAfterBackward: c.after})
				got[g.Rank()] = res
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			wantLoss, _ := stepSeries(want)
			for r, res := range got {
				loss, _ := stepSeries(res)
				if err := numtest.Close(loss, wantLoss, numtest.Tol{Rel: 1e-5}); err != nil {
					t.Errorf("rank %d: step losses against one CPU rank's: %v", r, err)
				}
			}
			seqs := make([][]ncclOp, len(backends))
			comms := map[uint64]bool{}
			groups := map[[2]uint64]int{} // (device, group) → operations
			for d := range seqs {
				seqs[d] = log.sequence(t, d)
				for _, o := range seqs[d] {
					comms[o.Comm] = true
					if o.Group != 0 {
						groups[[2]uint64{uint64(d), o.Group}]++
					}
				}
			}
			if err := checkNCCLOrder(seqs); err != nil {
				t.Fatal(err)
			}
			if err := checkNCCLStreams(seqs); err != nil {
				t.Error(err)
			}
			// The checker sees a rank that issues the same collectives
			// in another order: rank 0's last two consecutive ones on
			// communicators that another rank shares with it, swapped.
			shares := func(a, b uint64) bool {
				for _, seq := range seqs[1:] {
					in := map[uint64]bool{}
					for _, o := range seq {
						in[o.Comm] = true
					}
					if in[a] && in[b] {
						return true
					}
				}
				return false
			}
			bad := slices.Clone(seqs)
			bad[0] = slices.Clone(seqs[0])
			for i := len(bad[0]) - 1; i > 0; i-- {
				if a, b := bad[0][i-1].Comm, bad[0][i].Comm; a != b && shares(a, b) {
					bad[0][i], bad[0][i-1] = bad[0][i-1], bad[0][i]
					break
				}
			}
			if err := checkNCCLOrder(bad); err == nil {
				t.Errorf("rank 0's log with two collectives swapped passes the check")
			} else {
				t.Logf("with two of rank 0's collectives swapped: %v", err)
			}
			many := 0
			for _, n := range groups {
				if n > 1 {
					many++
				}
			}
			t.Logf("%d collectives on rank 0, %d communicators, %d NCCL groups (%d of several all-reduces) over the ranks",
				len(seqs[0]), len(comms), len(groups), many)
			if shape.Data > 1 && many == 0 {
				t.Errorf("no gradient bucket was issued as a NCCL group of several all-reduces")
			}
			// The buckets are the NCCL groups (every other collective is
			// issued alone): after the backward, each step's follow each
			// other in one run on rank 0; issued during it, the
			// backward's collectives on the X, Y or Z groups come between
			// them.
			runs, in := 0, false
			for _, o := range seqs[0] {
				if g := o.Group != 0; g != in {
					in = g
					if g {
						runs++
					}
				}
			}
			t.Logf("rank 0's buckets in %d runs of consecutive NCCL groups over %d steps", runs, len(batches))
			switch {
			case shape.Data == 1:
			case c.after && runs != len(batches):
				t.Errorf("buckets issued after the backward in %d runs over %d steps, want one a step", runs, len(batches))
			case !c.after && runs <= len(batches):
				t.Errorf("buckets issued in the backward in %d runs over %d steps: none interleaved with the backward's collectives", runs, len(batches))
			}
		})
	}
}
