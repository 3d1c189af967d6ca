// Package comm defines the communicators of the parallel engine: the
// collective operations (all-reduce, reduce-scatter, all-gather, broadcast,
// barrier, and non-blocking variants) that ranks of a group perform
// together, behind one interface, Comm.
//
// Implementations:
//   - package comm/local: n ranks in one process, one goroutine per rank,
//     for tests and single-node CPU training (apart from this package so
//     that users of the interface do not link the CPU backend);
//   - package comm/mpi (build tag mpi): Open MPI through cgo, one process
//     per rank, launched by mpirun or srun;
//   - a NCCL communicator for GPU tensors, in the CUDA backend.
//
// Every implementation passes the conformance suite in comm/commtest.
//
// # Semantics
//
// A communicator belongs to one rank of a group of Size ranks. Every rank
// of the group must call the same collectives on its communicator in the
// same order, blocking and non-blocking ones alike, with the same sizes
// (as in MPI and NCCL): the i-th collective of one rank meets the i-th
// collective of every other rank. A Comm is used by one goroutine at a
// time — its rank's — though Stats may be read from anywhere.
//
// Collectives work in place on engine tensors of the communicator's
// device (host tensors for local and MPI; device tensors for NCCL), F32,
// BF16 or I32, the same dtype on every rank. Elements are summed; the
// tensors of different ranks must not share memory. BF16 sums are formed
// in float32 and rounded to bf16: once, in rank order, by local and MPI
// (bit-identical on every rank); NCCL's may round at each step of its
// ring. Callers that need one rounding of a sum of float32 partial
// products sum them in F32 and round afterwards. A blocking collective returns when its result is ready for the
// kernels issued after it (on the CPU: when it is in memory; on a GPU: in
// stream order, so the host sees it after the backend synchronises). A
// non-blocking one returns a Request at once; its buffers must be left
// alone until Wait returns, and Wait makes the result ready in the same
// sense.
//
// Uneven sizes: reduce-scatter and all-gather split a tensor of n elements
// into Size chunks as Chunk says — ⌈n/Size⌉ elements each, the last ones
// shorter or empty — so that every chunk but the last non-empty one has
// the same length and starts at a multiple of it (which is what NCCL's
// equal-count collectives need, after padding the tail).
//
// Groups of one rank return at once: an all-reduce or broadcast leaves the
// tensor as it is, a reduce-scatter or all-gather copies src to dst, and
// nothing is counted.
//
// # Counting
//
// Every communicator counts, per (group, operation), the calls, their
// logical payload in elements and the elements each rank sends with a ring
// algorithm (SentFactor). The payload of an all-reduce or broadcast is the
// tensor's length; that of a reduce-scatter or all-gather is the FULL
// length n (src of a reduce-scatter, dst of an all-gather), not the chunk.
// A performance model computing volumes the same way (DESIGN.md, "AxoNN 4D
// algorithm") can then be compared with the counters exactly. Counts
// accumulate since creation (Stats.Ops[i].Total) and since the last
// SetStep (Stats.Ops[i].Step). All communicators split from one rank's
// world share that rank's counters and step, so one Stats call reports
// every group.
//
// # Watchdog
//
// A collective that gets no answer from the group within a timeout
// (WithTimeout; default 60 s, or MEMTRAIN_COMM_TIMEOUT) fails with a
// *TimeoutError naming the group, the rank, the collective and the step:
//
//	comm: group "z" (rank 1 of 2): all-gather at step 7: no answer from rank 0 within 1m0s
//
// local.New's communicators return it as an error (and the group is then broken: every
// later collective on it fails). MPI and NCCL cannot cancel a call blocked
// in C, so there the message goes to standard error and the process exits
// with status 3, which mpirun turns into the end of the whole job.
package comm

import (
	"fmt"
	"sort"

	"github.com/memtrain/memtrain/engine"
)

// Comm is one rank's handle on a group of ranks that perform collectives
// together. See the package documentation for ordering, buffers, uneven
// sizes, counting and the watchdog.
type Comm interface {
	// Rank is this rank's index in the group, 0 ≤ Rank < Size.
	Rank() int
	// Size is the number of ranks in the group.
	Size() int
	// Group names the group ("world", "x", "y", "z", "data", "tp", …) in
	// counters and error messages.
	Group() string

	// AllReduce replaces t, on every rank, by the elementwise sum of
	// every rank's t.
	AllReduce(t *engine.Tensor) error
	// ReduceScatter gives rank r chunk r (Chunk(n, Size, r)) of the
	// elementwise sum of every rank's src, of n elements, in dst. dst may
	// be exactly the chunk-r view of src (in place); otherwise the two
	// must not overlap.
	ReduceScatter(dst, src *engine.Tensor) error
	// AllGather writes every rank r's src into chunk r (Chunk(n, Size, r))
	// of dst, of n elements, on every rank: the inverse layout of
	// ReduceScatter. src may be exactly the chunk-Rank view of dst (in
	// place); otherwise the two must not overlap.
	AllGather(dst, src *engine.Tensor) error
	// Broadcast copies root's t into every rank's t.
	Broadcast(t *engine.Tensor, root int) error
	// Barrier returns once every rank of the group has called it.
	Barrier() error

	// IAllReduce, IReduceScatter and IAllGather start the collective and
	// return at once; Request.Wait completes it. Argument errors are
	// reported by Wait too.
	IAllReduce(t *engine.Tensor) Request
	IReduceScatter(dst, src *engine.Tensor) Request
	IAllGather(dst, src *engine.Tensor) Request

	// Split partitions the group, like MPI_Comm_split: a collective call
	// in which ranks passing the same color form a new group named name,
	// ordered by key and then by rank in this group. A rank passing
	// Undefined joins no group and gets a nil Comm. The new communicator
	// shares this one's counters, step and timeout.
	Split(name string, color, key int) (Comm, error)

	// Stats reports the counters of this rank: every group split from the
	// same world, not only this one.
	Stats() Stats
	// SetStep sets the training step named by watchdog messages and
	// restarts the per-step counts (Stats.Ops[i].Step) from zero. Like
	// Stats, it is shared by every communicator of the rank.
	SetStep(step int)

	// Close releases the communicator. Every rank of the group calls it
	// (MPI frees communicators collectively); closing the world of an MPI
	// job finalises MPI. A closed communicator must not be used.
	Close() error
}

// A Request is a non-blocking collective in flight.
type Request interface {
	// Wait blocks until the collective has completed and reports its
	// error. It may be called once.
	Wait() error
}

// Undefined is the color with which a rank takes part in a Split without
// joining any of the new groups.
const Undefined = -1

// Op names a collective operation, in counters and messages.
type Op uint8

const (
	AllReduce Op = iota
	ReduceScatter
	AllGather
	Broadcast
	Barrier
	// Split and Close move no data and are never counted; they are named
	// by errors and watchdog messages (closing an MPI world finalises MPI,
	// which waits for the other ranks).
	Split
	Close
	numOps
)

var opNames = [numOps]string{"all-reduce", "reduce-scatter", "all-gather", "broadcast", "barrier", "split", "close"}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Chunk is the part of a tensor of n elements that rank r of p holds after
// a reduce-scatter (and contributes to an all-gather): the elements
// [offset, offset+length). Chunks are ⌈n/p⌉ long, in rank order, and the
// last ones are shorter or empty when p does not divide n: n = 7 over
// p = 4 gives 2, 2, 2, 1; n = 5 gives 2, 2, 1, 0; n = 1 gives 1, 0, 0, 0.
// Equal chunks at multiples of ⌈n/p⌉ are what NCCL's equal-count
// collectives need: padding the tensor to p·⌈n/p⌉ changes no offset.
func Chunk(n, p, r int) (offset, length int) {
	if n < 0 || p < 1 || r < 0 || r >= p {
		panic(fmt.Sprintf("comm: Chunk(%d, %d, %d) out of range", n, p, r))
	}
	c := (n + p - 1) / p
	offset = min(r*c, n)
	return offset, min(c, n-offset)
}

// SentFactor is the number of elements each rank sends per element of
// payload when op runs over p ranks with a ring (pipelined) algorithm:
// 2(p−1)/p for an all-reduce (a reduce-scatter then an all-gather),
// (p−1)/p for a reduce-scatter, all-gather or broadcast (a chain: p−1
// ranks send the buffer, p−1 sends shared among p ranks), 0 for a barrier
// and for p = 1.
func SentFactor(op Op, p int) float64 {
	if p <= 1 {
		return 0
	}
	f := float64(p-1) / float64(p)
	switch op {
	case AllReduce:
		return 2 * f
	case ReduceScatter, AllGather, Broadcast:
		return f
	}
	return 0
}

// Counts are the totals of one operation on one group.
type Counts struct {
	Calls    int64 // collectives
	Elements int64 // logical payload: Σ n (see the package documentation)
	// Sent is Elements × SentFactor(op, size): the elements this rank
	// sends with a ring algorithm. It is computed from the integer
	// Elements, so that it equals a model's Σn × factor exactly.
	Sent float64
}

// OpStats are the counts of one operation on one group.
type OpStats struct {
	Group string
	Size  int
	Op    Op
	Total Counts // since the communicator was created
	Step  Counts // since the last SetStep
}

// Stats is a snapshot of a rank's counters.
type Stats struct {
	Step int       // the step last set by SetStep
	Ops  []OpStats // sorted by group, size, then operation
}

// Get returns the counts of op on group (zero if there were none). When
// groups of different sizes share a name, their counts are added up.
func (s Stats) Get(group string, op Op) OpStats {
	out := OpStats{Group: group, Op: op}
	for _, o := range s.Ops {
		if o.Group == group && o.Op == op {
			out.Size = o.Size
			out.Total = out.Total.add(o.Total)
			out.Step = out.Step.add(o.Step)
		}
	}
	return out
}

// Sum adds up the counts of every group and operation.
func (s Stats) Sum() (total, step Counts) {
	for _, o := range s.Ops {
		total = total.add(o.Total)
		step = step.add(o.Step)
	}
	return total, step
}

func (c Counts) add(d Counts) Counts {
	return Counts{Calls: c.Calls + d.Calls, Elements: c.Elements + d.Elements, Sent: c.Sent + d.Sent}
}

func sortOps(ops []OpStats) {
	sort.Slice(ops, func(i, j int) bool {
		a, b := ops[i], ops[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Size != b.Size {
			return a.Size < b.Size
		}
		return a.Op < b.Op
	})
}
