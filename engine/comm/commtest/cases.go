package commtest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

var cases = []Case{
	{"AllReduce", checkAllReduce},
	{"AllReduceInt32", checkAllReduceInt32},
	{"AllReduceBF16", checkAllReduceBF16},
	{"ReduceScatterBF16", checkReduceScatterBF16},
	{"ReduceScatter", checkReduceScatter},
	{"AllGather", checkAllGather},
	{"Broadcast", checkBroadcast},
	{"Barrier", checkBarrier},
	{"NonBlocking", checkNonBlocking},
	{"Groups", checkGroups},
	{"Split", checkSplit},
	{"Grid", checkGrid},
	{"Counters", checkCounters},
	{"Errors", checkErrors},
}

// lengths are the tensor lengths a group of p ranks is checked with:
// empty, shorter than the group, not a multiple of it, and longer than
// the blocks an implementation may work in.
func lengths(p int) []int {
	ns := []int{0, 1, 2, p - 1, p, p + 1, 7, 13, 64*p + 3, 5000}
	slices.Sort(ns)
	ns = slices.Compact(ns)
	if ns[0] < 0 {
		ns = ns[1:]
	}
	return ns
}

// kind is what values a check adds up.
type kind int

const (
	// integers are small whole numbers, whose sums are exact in any
	// order, so any implementation must get them exactly.
	integers kind = iota
	// randoms span several binades, so that the order of a sum shows in
	// its last bits.
	randoms
)

func (k kind) String() string { return [...]string{"integers", "randoms"}[k] }

// gen returns rank's n input values of a check identified by seed: every
// rank can compute every other rank's inputs.
func gen(seed uint64, rank, n int, k kind) []float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)))
	v := make([]float32, n)
	for i := range v {
		if k == integers {
			v[i] = float32(rng.IntN(41) - 20)
		} else {
			v[i] = float32((2*rng.Float64() - 1) * math.Ldexp(1, rng.IntN(12)-6))
		}
	}
	return v
}

// allInputs returns the inputs of every rank of a group of p.
func allInputs(seed uint64, p, n int, k kind) [][]float32 {
	return typedInputs(engine.F32, seed, p, n, k)
}

// typedInputs is allInputs as tensors of dtype hold them (Round).
func typedInputs(dtype engine.DType, seed uint64, p, n int, k kind) [][]float32 {
	in := make([][]float32, p)
	for q := range in {
		in[q] = Round(dtype, gen(seed, q, n, k))
	}
	return in
}

func seedOf(parts ...int) uint64 {
	h := uint64(14695981039346656037)
	for _, p := range parts {
		h = (h ^ uint64(p)) * 1099511628211
	}
	return h
}

// checkSums checks got against the elementwise sums of inputs over
// [lo, lo+len(got)). Sums of integers must be exact; others exact in rank
// order when the implementation promises it, else within the bound of a
// float32 sum of p terms in any order: (p−1)·u·Σ|xᵢ|.
func (r *R) checkSums(what string, got []float32, inputs [][]float32, lo int, k kind) {
	r.checkTypedSums(engine.F32, what, got, inputs, lo, k)
}

// checkTypedSums is checkSums for tensors of dtype. A BF16 sum in rank
// order is the float32 sum in rank order rounded once to bf16; in any
// order it may also be rounded to bf16 at each of its p−1 additions (a
// ring, as NCCL's), each off by at most u = 2⁻⁸ of a partial sum, itself
// at most Σ|xᵢ|: (p−1)·u·Σ|xᵢ|, and at least one rounding's u·Σ|xᵢ|.
func (r *R) checkTypedSums(dtype engine.DType, what string, got []float32, inputs [][]float32, lo int, k kind) {
	bad := 0
	p := len(inputs)
	for i, g := range got {
		j := lo + i
		var ordered float32
		var ref, abs float64
		for q, in := range inputs {
			if q == 0 {
				ordered = in[j]
			} else {
				ordered += in[j]
			}
			ref += float64(in[j])
			abs += math.Abs(float64(in[j]))
		}
		bound := float64(p-1) * 0x1p-24 * abs * 1.0001
		if dtype == engine.BF16 {
			ordered = Round(dtype, []float32{ordered})[0]
			bound = float64(max(p-1, 1)) * 0x1p-8 * abs * 1.0001
		}
		rankOrder := r.cfg.RankOrder || (dtype == engine.BF16 && r.cfg.BF16RankOrder)
		var ok bool
		switch {
		case k == integers:
			ok = float64(g) == ref
		case rankOrder:
			ok = math.Float32bits(g) == math.Float32bits(ordered)
		default:
			ok = math.Abs(float64(g)-ref) <= bound
		}
		if !ok {
			r.Errorf("%s: element %d is %v, want %v (rank-order %v sum %v)", what, j, g, ref, dtype, ordered)
			if bad++; bad == 3 {
				return
			}
		}
	}
}

// sameEverywhere checks that every rank holds the same bits in vals,
// by gathering them all. It is a collective.
func (r *R) sameEverywhere(what string, vals []float32) {
	p, n := r.C.Size(), len(vals)
	src := r.F32(vals, what+" (gather src)")
	dst := r.F32(make([]float32, n*p), what+" (gather dst)")
	r.Must(r.C.AllGather(dst, src), what+": all-gather of the results")
	all := r.Values(dst)
	for q := 0; q < p; q++ {
		for i := range n {
			if math.Float32bits(all[q*n+i]) != math.Float32bits(vals[i]) {
				r.Errorf("%s: element %d is %v here but %v on rank %d", what, i, vals[i], all[q*n+i], q)
				break
			}
		}
	}
}

func (r *R) equal(what string, got, want []float32) {
	if len(got) != len(want) {
		r.Errorf("%s: %d elements, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			r.Errorf("%s: element %d is %v, want %v", what, i, got[i], want[i])
			return
		}
	}
}

func filled(n int, v float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return x
}

func checkAllReduce(r *R) { checkTypedAllReduce(r, engine.F32) }

// checkAllReduceBF16 all-reduces bf16 tensors: summed in float32 and
// rounded once in rank order (local, MPI), or within the bound of
// roundings at every addition (checkTypedSums), and the same on every
// rank. Sums of small integers are exact in bf16 too.
func checkAllReduceBF16(r *R) { checkTypedAllReduce(r, engine.BF16) }

func checkTypedAllReduce(r *R, dtype engine.DType) {
	p, rank := r.C.Size(), r.C.Rank()
	for _, n := range lengths(p) {
		for _, k := range []kind{integers, randoms} {
			what := fmt.Sprintf("%v all-reduce of %d %v", dtype, n, k)
			in := typedInputs(dtype, seedOf(1, n, int(k)), p, n, k)
			t := r.Tensor(dtype, in[rank], what)
			r.Must(r.C.AllReduce(t), what)
			got := r.Values(t)
			r.checkTypedSums(dtype, what, got, in, 0, k)
			if !r.cfg.RankOrder {
				r.sameEverywhere(what, got)
			}
		}
	}
	if dtype == engine.BF16 {
		r.roundsOnce()
	}
}

// roundsOnce all-reduces bf16 values whose sum rounded at each addition
// differs from the sum rounded once: 1 on rank 0 and 2⁻⁸ — half a bf16
// ulp of 1 — on every other rank. With p > 2 ranks the exact sum
// 1 + (p−1)·2⁻⁸ rounds to a value above 1, while rounding 1 + 2⁻⁸ to
// even at each step stays at 1. Only the rank-order promise (local, MPI)
// is checked: a ring of bf16 additions (NCCL) may round at each step.
func (r *R) roundsOnce() {
	p, rank := r.C.Size(), r.C.Rank()
	if !(r.cfg.RankOrder || r.cfg.BF16RankOrder) || p < 3 {
		return
	}
	v := float32(0x1p-8)
	if rank == 0 {
		v = 1
	}
	t := r.Tensor(engine.BF16, filled(5, v), "bf16 all-reduce rounded once")
	r.Must(r.C.AllReduce(t), "bf16 all-reduce rounded once")
	want := Round(engine.BF16, []float32{1 + float32(p-1)*0x1p-8})[0]
	r.equal("bf16 all-reduce of 1 and (p−1)·2⁻⁸, rounded once", r.Values(t), filled(5, want))
}

func checkAllReduceInt32(r *R) {
	p, rank := r.C.Size(), r.C.Rank()
	for _, n := range []int{0, 1, 7, 1000} {
		what := fmt.Sprintf("i32 all-reduce of %d", n)
		in := allInputs(seedOf(2, n), p, n, integers)
		t := r.Tensor(engine.I32, in[rank], what)
		r.Must(r.C.AllReduce(t), what)
		r.checkSums(what, r.Values(t), in, 0, integers)
	}
}

func checkReduceScatter(r *R) { checkTypedReduceScatter(r, engine.F32) }

// checkReduceScatterBF16 is checkReduceScatter for bf16 tensors, summed
// as checkAllReduceBF16 says.
func checkReduceScatterBF16(r *R) { checkTypedReduceScatter(r, engine.BF16) }

func checkTypedReduceScatter(r *R, dtype engine.DType) {
	p, rank := r.C.Size(), r.C.Rank()
	for _, n := range lengths(p) {
		off, m := comm.Chunk(n, p, rank)
		for _, k := range []kind{integers, randoms} {
			what := fmt.Sprintf("%v reduce-scatter of %d %v", dtype, n, k)
			in := typedInputs(dtype, seedOf(3, n, int(k)), p, n, k)
			src := r.Tensor(dtype, in[rank], what+" src")
			dst := r.Tensor(dtype, filled(m, -777), what+" dst")
			r.Must(r.C.ReduceScatter(dst, src), what)
			got := r.Values(dst)
			r.checkTypedSums(dtype, what, got, in, off, k)
			r.equal(what+": src afterwards", r.Values(src), in[rank])

			what += " in place"
			src = r.Tensor(dtype, in[rank], what)
			dst = src.View(off, m)
			r.Must(r.C.ReduceScatter(dst, src), what)
			r.checkTypedSums(dtype, what, r.Values(dst), in, off, k)
		}
	}
}

func checkAllGather(r *R) {
	p, rank := r.C.Size(), r.C.Rank()
	for _, dtype := range []engine.DType{engine.F32, engine.BF16, engine.I32} {
		for _, n := range lengths(p) {
			what := fmt.Sprintf("%v all-gather of %d", dtype, n)
			want := make([]float32, 0, n)
			var mine []float32
			for q := 0; q < p; q++ {
				_, m := comm.Chunk(n, p, q)
				c := gen(seedOf(4, n), q, m, integers)
				want = append(want, c...)
				if q == rank {
					mine = c
				}
			}
			src := r.Tensor(dtype, mine, what+" src")
			dst := r.Tensor(dtype, filled(n, -777), what+" dst")
			r.Must(r.C.AllGather(dst, src), what)
			r.equal(what, r.Values(dst), want)
			r.equal(what+": src afterwards", r.Values(src), mine)

			what += " in place"
			off, m := comm.Chunk(n, p, rank)
			init := filled(n, -777)
			copy(init[off:], mine)
			dst = r.Tensor(dtype, init, what)
			r.Must(r.C.AllGather(dst, dst.View(off, m)), what)
			r.equal(what, r.Values(dst), want)
		}
	}
}

func checkBroadcast(r *R) {
	p, rank := r.C.Size(), r.C.Rank()
	for root := 0; root < p; root++ {
		for _, dtype := range []engine.DType{engine.F32, engine.BF16, engine.I32} {
			for _, n := range []int{0, 1, 7, 3000} {
				what := fmt.Sprintf("%v broadcast of %d from %d", dtype, n, root)
				k := randoms
				if dtype == engine.I32 {
					k = integers
				}
				t := r.Tensor(dtype, gen(seedOf(5, n), rank, n, k), what)
				r.Must(r.C.Broadcast(t, root), what)
				r.equal(what, r.Values(t), Round(dtype, gen(seedOf(5, n), root, n, k)))
			}
		}
	}
}

func checkBarrier(r *R) {
	p, rank := r.C.Size(), r.C.Rank()
	const nap = 100 * time.Millisecond
	r.Must(r.C.Barrier(), "barrier")
	start := time.Now()
	if rank == p-1 {
		time.Sleep(nap)
	}
	r.Must(r.C.Barrier(), "barrier after the last rank's nap")
	// Every rank left the first barrier at about the same time, so none
	// can leave the second before the last rank has napped; half the nap
	// leaves room for the ranks' skew in leaving the first.
	if waited := time.Since(start); p > 1 && waited < nap/2 {
		r.Errorf("barrier returned after %v, before rank %d had called it (it napped %v)", waited, p-1, nap)
	}
	for range 3 {
		r.Must(r.C.Barrier(), "barrier")
	}
}

func checkNonBlocking(r *R) {
	p, rank := r.C.Size(), r.C.Rank()
	inA := allInputs(seedOf(6, 1), p, 1000, randoms)
	inB := allInputs(seedOf(6, 2), p, 777, randoms)
	inE := allInputs(seedOf(6, 3), p, 50, integers)
	const nC = 301
	var wantC, mineC []float32
	for q := 0; q < p; q++ {
		_, m := comm.Chunk(nC, p, q)
		c := gen(seedOf(6, 4), q, m, randoms)
		wantC = append(wantC, c...)
		if q == rank {
			mineC = c
		}
	}

	a := r.F32(inA[rank], "non-blocking all-reduce")
	offB, mB := comm.Chunk(777, p, rank)
	bSrc := r.F32(inB[rank], "non-blocking reduce-scatter src")
	bDst := r.F32(filled(mB, -777), "non-blocking reduce-scatter dst")
	cSrc := r.F32(mineC, "non-blocking all-gather src")
	cDst := r.F32(filled(nC, -777), "non-blocking all-gather dst")
	e := r.F32(inE[rank], "blocking all-reduce among non-blocking ones")
	inF := typedInputs(engine.BF16, seedOf(6, 5), p, 333, randoms)
	f := r.Tensor(engine.BF16, inF[rank], "non-blocking bf16 all-reduce")

	ra := r.C.IAllReduce(a)
	rf := r.C.IAllReduce(f)
	rb := r.C.IReduceScatter(bDst, bSrc)
	r.Must(r.C.AllReduce(e), "blocking all-reduce issued after two non-blocking ones")
	rc := r.C.IAllGather(cDst, cSrc)
	// Ranks wait in different orders: completion must not depend on it.
	reqs := []struct {
		name string
		req  comm.Request
	}{{"all-reduce", ra}, {"bf16 all-reduce", rf}, {"reduce-scatter", rb}, {"all-gather", rc}}
	if rank%2 == 1 {
		slices.Reverse(reqs)
	}
	for _, q := range reqs {
		r.Must(q.req.Wait(), "non-blocking "+q.name)
	}
	r.checkSums("non-blocking all-reduce", r.Values(a), inA, 0, randoms)
	r.checkSums("non-blocking reduce-scatter", r.Values(bDst), inB, offB, randoms)
	r.equal("non-blocking all-gather", r.Values(cDst), wantC)
	r.checkSums("blocking all-reduce among non-blocking ones", r.Values(e), inE, 0, integers)
	r.checkTypedSums(engine.BF16, "non-blocking bf16 all-reduce", r.Values(f), inF, 0, randoms)

	// Many in flight at once, completed in reverse.
	const many = 16
	ins := make([][][]float32, many)
	ts := make([]*engine.Tensor, many)
	rs := make([]comm.Request, many)
	for i := range many {
		ins[i] = allInputs(seedOf(6, 10+i), p, 100+i, randoms)
		ts[i] = r.F32(ins[i][rank], "one of many non-blocking all-reduces")
		rs[i] = r.C.IAllReduce(ts[i])
	}
	for i := many - 1; i >= 0; i-- {
		r.Must(rs[i].Wait(), fmt.Sprintf("non-blocking all-reduce %d of %d", i, many))
	}
	for i := range many {
		r.checkSums(fmt.Sprintf("non-blocking all-reduce %d of %d", i, many), r.Values(ts[i]), ins[i], 0, randoms)
	}
}

// checkGroups all-reduces groups of tensors with comm.IAllReduceGroup (the
// communicator's group calls where it is a comm.Grouper): every length of
// the suite, empty ones included, and an I32 tensor in one group, between
// a non-blocking reduce-scatter and a blocking all-reduce on the same
// communicator, then an empty group. The sums are those of one all-reduce
// a tensor, and so are the counts.
func checkGroups(r *R) {
	p, rank := r.C.Size(), r.C.Rank()
	ns := lengths(p)
	ins := make([][][]float32, len(ns))
	ts := make([]*engine.Tensor, 0, len(ns)+1)
	var elems int64
	for i, n := range ns {
		ins[i] = allInputs(seedOf(12, n), p, n, randoms)
		ts = append(ts, r.F32(ins[i][rank], "grouped all-reduce"))
		elems += int64(n)
	}
	inI := allInputs(seedOf(12, -1), p, 37, integers)
	ts = append(ts, r.Tensor(engine.I32, inI[rank], "grouped i32 all-reduce"))
	elems += 37
	inB := allInputs(seedOf(12, -2), p, 4*p, randoms)
	offB, mB := comm.Chunk(4*p, p, rank)
	bSrc := r.F32(inB[rank], "reduce-scatter before a group")
	bDst := r.F32(filled(mB, -777), "reduce-scatter before a group")
	inE := allInputs(seedOf(12, -3), p, 11, integers)
	e := r.F32(inE[rank], "blocking all-reduce after a group")

	before := r.C.Stats().Get(r.C.Group(), comm.AllReduce)
	rb := r.C.IReduceScatter(bDst, bSrc)
	rg := comm.IAllReduceGroup(r.C, ts)
	r.Must(r.C.AllReduce(e), "blocking all-reduce after a group")
	r.Must(comm.IAllReduceGroup(r.C, nil).Wait(), "empty group")
	r.Must(rg.Wait(), "group of all-reduces")
	r.Must(rb.Wait(), "reduce-scatter before a group")
	after := r.C.Stats().Get(r.C.Group(), comm.AllReduce)

	for i, n := range ns {
		what := fmt.Sprintf("grouped all-reduce of %d", n)
		got := r.Values(ts[i])
		r.checkSums(what, got, ins[i], 0, randoms)
	}
	r.checkSums("grouped i32 all-reduce", r.Values(ts[len(ns)]), inI, 0, integers)
	r.checkSums("reduce-scatter before a group", r.Values(bDst), inB, offB, randoms)
	r.checkSums("blocking all-reduce after a group", r.Values(e), inE, 0, integers)
	calls, want := after.Total.Calls-before.Total.Calls, int64(len(ts)+1)
	got := after.Total.Elements - before.Total.Elements
	if p == 1 {
		want, elems = 0, 0 // a group of one counts nothing
	} else {
		elems += 11
	}
	if calls != want || got != elems {
		r.Errorf("a group of %d all-reduces and one more: %d calls of %d elements counted, want %d of %d", len(ts), calls, got, want, elems)
	}
}

// membership all-reduces a one-hot vector of the world rank over c, which
// must then hold a 1 exactly at the world ranks of c's members.
func (r *R) membership(what string, c comm.Comm, worldRank, worldSize int, member func(q int) bool) {
	v := make([]float32, worldSize)
	v[worldRank] = 1
	t := r.F32(v, what)
	r.Must(c.AllReduce(t), what+": all-reduce")
	got := r.Values(t)
	for q, g := range got {
		want := float32(0)
		if member(q) {
			want = 1
		}
		if g != want {
			r.Errorf("%s: world rank %d counted %v times, want %v", what, q, g, want)
		}
	}
}

func checkSplit(r *R) {
	p, rank := r.C.Size(), r.C.Rank()

	// Parity groups, ordered by descending rank.
	sub, err := r.C.Split("parity", rank%2, -rank)
	r.Must(err, "split by parity")
	if sub == nil {
		r.Fatalf("split by parity gave no communicator")
	}
	var members []int
	for q := p - 1; q >= 0; q-- {
		if q%2 == rank%2 {
			members = append(members, q)
		}
	}
	if sub.Size() != len(members) || sub.Rank() != slices.Index(members, rank) || sub.Group() != "parity" {
		r.Errorf("parity group: rank %d of %d named %q, want rank %d of %d named \"parity\"",
			sub.Rank(), sub.Size(), sub.Group(), slices.Index(members, rank), len(members))
	}
	r.membership("parity group", sub, rank, p, func(q int) bool { return q%2 == rank%2 })

	// A group split again: halves of each parity group.
	half, err := sub.Split("half", sub.Rank()*2/sub.Size(), sub.Rank())
	r.Must(err, "split of the parity group")
	myHalf := sub.Rank() * 2 / sub.Size()
	r.membership("half of the parity group", half, rank, p, func(q int) bool {
		i := slices.Index(members, q)
		return q%2 == rank%2 && i*2/len(members) == myHalf
	})

	// Rank 0 stays out.
	rest, err := r.C.Split("rest", map[bool]int{true: comm.Undefined, false: 3}[rank == 0], rank)
	r.Must(err, "split leaving rank 0 out")
	if rank == 0 {
		if rest != nil {
			r.Errorf("split with color Undefined gave a communicator")
		}
	} else {
		if rest == nil {
			r.Fatalf("split gave no communicator")
		}
		if rest.Size() != p-1 || rest.Rank() != rank-1 {
			r.Errorf("group without rank 0: rank %d of %d, want %d of %d", rest.Rank(), rest.Size(), rank-1, p-1)
		}
		r.membership("group without rank 0", rest, rank, p, func(q int) bool { return q != 0 })
		r.Must(rest.Close(), "close")
	}
	r.Must(half.Close(), "close")
	r.Must(sub.Close(), "close")
	// The parent still works.
	r.membership("parent after splits", r.C, rank, p, func(int) bool { return true })
}

// grids returns every way of writing p as data·x·y·z.
func grids(p int) []comm.Grid {
	var out []comm.Grid
	for d := 1; d <= p; d++ {
		for x := 1; d*x <= p; x++ {
			for y := 1; d*x*y <= p; y++ {
				if p%(d*x*y) == 0 {
					out = append(out, comm.Grid{Data: d, X: x, Y: y, Z: p / (d * x * y)})
				}
			}
		}
	}
	return out
}

func checkGrid(r *R) {
	p, rank := r.C.Size(), r.C.Rank()
	for _, g := range grids(p) {
		gs, err := comm.SplitGrid(r.C, g)
		r.Must(err, fmt.Sprintf("split into grid %v", g))
		d, x, y, z := g.Coords(rank)
		if g.Rank(d, x, y, z) != rank {
			r.Errorf("grid %v: Rank(Coords(%d)) = %d", g, rank, g.Rank(d, x, y, z))
		}
		groups := []struct {
			c          comm.Comm
			name       string
			rank, size int
			member     func(q int) bool
		}{
			{gs.X, "x", x, g.X, func(q int) bool { qd, _, qy, qz := g.Coords(q); return qd == d && qy == y && qz == z }},
			{gs.Y, "y", y, g.Y, func(q int) bool { qd, qx, _, qz := g.Coords(q); return qd == d && qx == x && qz == z }},
			{gs.Z, "z", z, g.Z, func(q int) bool { qd, qx, qy, _ := g.Coords(q); return qd == d && qx == x && qy == y }},
			{gs.Data, "data", d, g.Data, func(q int) bool { _, qx, qy, qz := g.Coords(q); return qx == x && qy == y && qz == z }},
			{gs.DataZ, "data-z", d*g.Z + z, g.Data * g.Z, func(q int) bool { _, qx, qy, _ := g.Coords(q); return qx == x && qy == y }},
		}
		for _, gr := range groups {
			what := fmt.Sprintf("grid %v, group %s", g, gr.name)
			if gr.c.Group() != gr.name || gr.c.Rank() != gr.rank || gr.c.Size() != gr.size {
				r.Errorf("%s: rank %d of %d named %q, want rank %d of %d", what, gr.c.Rank(), gr.c.Size(), gr.c.Group(), gr.rank, gr.size)
			}
			r.membership(what, gr.c, rank, p, gr.member)
		}
		r.Must(gs.Close(), "close grid groups")
	}
}

func checkCounters(r *R) {
	p := r.C.Size()
	group := r.C.Group()
	before := r.C.Stats()
	r.C.SetStep(7)
	if s := r.C.Stats(); s.Step != 7 {
		r.Errorf("Stats().Step = %d after SetStep(7)", s.Step)
	}
	_, m13 := comm.Chunk(13, p, r.C.Rank())
	_, m9 := comm.Chunk(9, p, r.C.Rank())
	r.Must(r.C.AllReduce(r.F32(make([]float32, 10), "")), "all-reduce")
	r.Must(r.C.AllReduce(r.F32(make([]float32, 10), "")), "all-reduce")
	r.Must(r.C.IAllReduce(r.F32(make([]float32, 4), "")).Wait(), "non-blocking all-reduce")
	r.Must(r.C.ReduceScatter(r.F32(make([]float32, m13), ""), r.F32(make([]float32, 13), "")), "reduce-scatter")
	r.Must(r.C.IAllGather(r.F32(make([]float32, 9), ""), r.F32(make([]float32, m9), "")).Wait(), "all-gather")
	r.Must(r.C.Broadcast(r.F32(make([]float32, 5), ""), 0), "broadcast")
	r.Must(r.C.Barrier(), "barrier")
	sub, err := r.C.Split("counted", 0, r.C.Rank())
	r.Must(err, "split")
	r.Must(sub.AllReduce(r.F32(make([]float32, 6), "")), "all-reduce on a split group")
	r.Must(sub.Close(), "close")
	after := r.C.Stats()

	want := []struct {
		group        string
		op           comm.Op
		calls, elems int64
	}{
		{group, comm.AllReduce, 3, 24},
		{group, comm.ReduceScatter, 1, 13},
		{group, comm.AllGather, 1, 9},
		{group, comm.Broadcast, 1, 5},
		{group, comm.Barrier, 1, 0},
		{"counted", comm.AllReduce, 1, 6},
	}
	for _, w := range want {
		if p == 1 {
			w.calls, w.elems = 0, 0 // a group of one counts nothing
		}
		b, a := before.Get(w.group, w.op), after.Get(w.group, w.op)
		total := comm.Counts{Calls: a.Total.Calls - b.Total.Calls, Elements: a.Total.Elements - b.Total.Elements}
		if total.Calls != w.calls || total.Elements != w.elems {
			r.Errorf("%s on %q: %d calls of %d elements counted, want %d of %d", w.op, w.group, total.Calls, total.Elements, w.calls, w.elems)
		}
		if a.Step.Calls != w.calls || a.Step.Elements != w.elems {
			r.Errorf("%s on %q since SetStep: %d calls of %d elements, want %d of %d", w.op, w.group, a.Step.Calls, a.Step.Elements, w.calls, w.elems)
		}
		// Only the step's counts are of this group alone: under RunRank,
		// groups of other sizes named alike have counted before.
		if f := comm.SentFactor(w.op, p); a.Step.Sent != float64(w.elems)*f {
			r.Errorf("%s on %q since SetStep: sent %v, want %d elements × %v", w.op, w.group, a.Step.Sent, w.elems, f)
		}
	}
	r.C.SetStep(8)
	s := r.C.Stats()
	if _, step := s.Sum(); step != (comm.Counts{}) || s.Step != 8 {
		r.Errorf("after SetStep(8): step %d, step counts %+v, want 8 and zero", s.Step, step)
	}
	if total, _ := s.Sum(); p > 1 && total.Calls < 8 {
		r.Errorf("Sum of totals: %d calls, want at least 8", total.Calls)
	}
}

func checkErrors(r *R) {
	p, rank := r.C.Size(), r.C.Rank()
	group := r.C.Group()
	// Every rank makes the same mistakes; each must be refused before
	// anything is sent, leaving the group in step.
	expect := func(err error, op comm.Op, what string) {
		var e *comm.Error
		switch {
		case err == nil:
			r.Errorf("%s: no error", what)
		case !errors.As(err, &e):
			r.Errorf("%s: error %v is a %T, not a *comm.Error", what, err, err)
		case e.Op != op || e.Group != group || e.Rank != rank || e.Size != p:
			r.Errorf("%s: error %q names %v on %q rank %d of %d, want %v on %q rank %d of %d",
				what, err, e.Op, e.Group, e.Rank, e.Size, op, group, rank, p)
		}
	}
	const n = 8
	off, m := comm.Chunk(n, p, rank)
	src := r.F32(make([]float32, n), "src")
	expect(r.C.ReduceScatter(r.F32(make([]float32, m+1), ""), src), comm.ReduceScatter, "reduce-scatter into a dst one too long")
	expect(r.C.AllGather(src, r.F32(make([]float32, m+1), "")), comm.AllGather, "all-gather of a src one too long")
	expect(r.C.IReduceScatter(r.F32(make([]float32, m+1), ""), src).Wait(), comm.ReduceScatter, "non-blocking reduce-scatter into a dst one too long")
	expect(r.C.IAllReduce(nil).Wait(), comm.AllReduce, "non-blocking all-reduce of nil")
	expect(r.C.AllReduce(nil), comm.AllReduce, "all-reduce of nil")
	expect(r.C.Broadcast(src, p), comm.Broadcast, "broadcast from a root outside the group")
	expect(r.C.Broadcast(src, -1), comm.Broadcast, "broadcast from root -1")
	if p > 1 {
		o := 1
		if off == 1 {
			o = 2
		}
		expect(r.C.ReduceScatter(src.View(o, m), src), comm.ReduceScatter, "reduce-scatter into a dst overlapping src elsewhere than its chunk")
	}
	// Still in step.
	in := allInputs(seedOf(7), p, 3, integers)
	t := r.F32(in[rank], "all-reduce after refused calls")
	r.Must(r.C.AllReduce(t), "all-reduce after refused calls")
	r.checkSums("all-reduce after refused calls", r.Values(t), in, 0, integers)
}
