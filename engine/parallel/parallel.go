// Package parallel places a rank in AxoNN's four-dimensional grid, Data × X
// × Y × Z (DESIGN.md, "AxoNN 4D algorithm"; engine/perfmodel's package
// documentation has the layout): its communicators and coordinates, which
// part of each weight it holds (Shard, by the checkpoints.Split its
// family declares), which ranks sum and count its gradient (GradGroups,
// CountsUnique), how those parts are read from and put back into
// full-shape tensors, and Launch, which runs a whole grid of ranks in this
// process.
//
// The model math on a grid lives in engine/llama, beside the one-rank code
// it generalises; this package knows only shapes and communicators.
package parallel

import (
	"errors"
	"fmt"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// Overlap switches AxoNN's three ways of hiding communication behind
// compute. None of them changes a result: they only change when a
// collective's result is waited for.
type Overlap struct {
	// AllReduce (OAR): a linear layer's input-gradient all-reduce runs
	// while its weight gradient is computed.
	AllReduce bool
	// ReduceScatter (ORS): a weight gradient's reduce-scatter over Z runs
	// while the backward pass goes on; its shard is added when the buffer
	// is needed again or the pass ends.
	ReduceScatter bool
	// AllGather (OAG): the Z all-gather of the next unit of weights (a
	// decoder layer, the embedding, the head) is issued one unit ahead,
	// in execution order.
	AllGather bool
}

// AllOverlap turns every overlap on.
func AllOverlap() Overlap { return Overlap{AllReduce: true, ReduceScatter: true, AllGather: true} }

func (o Overlap) String() string {
	on := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	return fmt.Sprintf("OAR %s, ORS %s, OAG %s", on(o.AllReduce), on(o.ReduceScatter), on(o.AllGather))
}

// Grid is one rank's place in a 4D grid: the communicators of its groups
// (comm.SplitGrid: g.X, g.Y, g.Z, g.Data, g.DataZ, g.World), its
// coordinates and the overlap switches.
type Grid struct {
	*comm.Groups
	At      Coord
	Overlap Overlap
}

// Coord is a rank's position along each axis of the grid.
type Coord struct{ Data, X, Y, Z int }

// New wraps the groups of one rank. The coordinates are the rank's
// positions in its groups, as comm.SplitGrid orders them.
func New(groups *comm.Groups, ov Overlap) *Grid {
	at := Coord{Data: groups.Data.Rank(), X: groups.X.Rank(), Y: groups.Y.Rank(), Z: groups.Z.Rank()}
	return &Grid{Groups: groups, At: at, Overlap: ov}
}

// One is the grid of one rank on backend b: shape 1×1×1×1, coordinates
// zero, every group a group of one (comm.One), so that one rank runs the
// grid's code with nothing to exchange — its collectives return at once,
// and its scalar sums and error agreement leave the values as they are.
func One(b engine.Backend) *Grid {
	groups, err := comm.SplitGrid(comm.One(b, "world"), comm.Grid{Data: 1, X: 1, Y: 1, Z: 1})
	if err != nil {
		panic(err) // a group of one splits into groups of one
	}
	return New(groups, Overlap{})
}

// OrOne is g, or the grid of one rank on b where g is nil: the one place
// where nil means one rank, for the entry points that accept it (a model's
// options, a run's rank), so that the code behind them meets a grid
// always.
func OrOne(g *Grid, b engine.Backend) *Grid {
	if g == nil {
		return One(b)
	}
	return g
}

// Shape is the grid's size along each axis.
func (g *Grid) Shape() comm.Grid { return g.Groups.Grid }

// Rank is this rank's number in the world.
func (g *Grid) Rank() int { return g.World.Rank() }

// BatchRanks is the number of ranks that split the batch's sequences
// (Data·Z), and BatchRank this rank's index among them: the rank a data
// loader shards by.
func (g *Grid) BatchRanks() int { return g.Shape().Data * g.Shape().Z }

// BatchRank is this rank's index among the BatchRanks ranks, d·Z + z
// (its rank in the data-z group).
func (g *Grid) BatchRank() int { return g.At.Data*g.Shape().Z + g.At.Z }

// Check reports whether the model's dimensions split over the grid the
// way the engine lays them out: X divides hidden_size; Y divides the
// attention heads, the key/value heads, intermediate_size and vocab_size;
// Z divides every weight's (x, y) block. engine/perfmodel's Grid.Validate
// is this function, so the planner and the engine agree by construction.
func Check(cfg *checkpoints.Config, shape comm.Grid) error {
	if shape.Data < 1 || shape.X < 1 || shape.Y < 1 || shape.Z < 1 {
		return fmt.Errorf("parallel: grid %v: every axis needs at least one rank", shape)
	}
	fail := func(axis string, n int, field string, v int) error {
		return fmt.Errorf("parallel: grid %v: %s=%d does not divide %s %d", shape, axis, n, field, v)
	}
	if cfg.HiddenSize%shape.X != 0 {
		return fail("X", shape.X, "hidden_size", cfg.HiddenSize)
	}
	for _, d := range []struct {
		field string
		v     int
	}{
		{"num_attention_heads", cfg.NumAttentionHeads},
		{"num_key_value_heads", cfg.NumKeyValueHeads},
		{"intermediate_size", cfg.IntermediateSize},
		{"vocab_size", cfg.VocabSize},
	} {
		if d.v%shape.Y != 0 {
			return fail("Y", shape.Y, d.field, d.v)
		}
	}
	for _, s := range cfg.TensorSpecs() {
		if err := checkSplit(shape, s); err != nil {
			return err
		}
	}
	return nil
}

// checkSplit reports whether the grid divides one declared tensor: its
// split axes its rows and columns, Z its (x, y) block when the split
// chunks it.
func checkSplit(shape comm.Grid, s checkpoints.TensorSpec) error {
	if !s.Split.Valid() || (s.Split.Dims() != 0 && s.Split.Dims() != len(s.Shape)) {
		return fmt.Errorf("parallel: %s of shape %v is declared %v", s.Name, s.Shape, s.Split)
	}
	rows, cols := engine.RowsCols(s.Shape)
	ra, ca := s.Split.Axes()
	for _, d := range []struct {
		what string
		n    int
		a    checkpoints.Axis
	}{{"rows", rows, ra}, {"columns", cols, ca}} {
		if p := axisSize(shape, d.a); d.n%p != 0 {
			return fmt.Errorf("parallel: grid %v: %v=%d does not divide %s's %d %s", shape, d.a, p, s.Name, d.n, d.what)
		}
	}
	if !s.Split.ChunksZ() {
		return nil
	}
	sh := ShardAt(shape, 0, 0, 0, s.Split, s.Shape)
	r, c := sh.Row1-sh.Row0, sh.Col1-sh.Col0
	if (r*c)%shape.Z != 0 {
		return fmt.Errorf("parallel: grid %v: Z=%d does not divide %s's (x,y) block of %d×%d = %d elements", shape, shape.Z, s.Name, r, c, r*c)
	}
	return nil
}

// axisSize is the number of ranks along a, 1 for none.
func axisSize(shape comm.Grid, a checkpoints.Axis) int {
	switch a {
	case checkpoints.AxisX:
		return shape.X
	case checkpoints.AxisY:
		return shape.Y
	}
	return 1
}

// SumBatch replaces vals, on every rank, by their sums over the Data·Z
// coordinates, for values that the X·Y ranks of one coordinate hold alike
// (they see the same tokens): loss sums, target counts. Each coordinate
// counts once. It runs on the world group, whose scalar traffic the
// performance model leaves out (engine/perfmodel counts only the groups
// x, y, z, data and data-z), in float32.
func (g *Grid) SumBatch(b engine.Backend, vals []float64) error {
	return g.sumWorld(b, vals, g.CountsBatch())
}

// CountsBatch reports whether this rank's batch values (loss sums, target
// counts) count in a sum over the world: one X·Y rank of each Data·Z
// coordinate. SumBatch sums on the host; a device-side sum (llama's step
// sums) zeroes the values of the ranks that do not count.
func (g *Grid) CountsBatch() bool { return g.At.X == 0 && g.At.Y == 0 }

// CountsUnique reports whether this rank's copy of a tensor split as
// split counts in a sum of its distinct elements over the world (the
// global gradient norm): CountsAt at this rank's coordinates.
func (g *Grid) CountsUnique(split checkpoints.Split) bool { return CountsAt(g.At, split) }

// CountsAt reports whether the copy that the rank at coordinates at holds
// of a tensor split as split counts once in a sum over the world: of the
// ranks that hold the same elements — the data replicas, and the ranks
// along every axis the split does not cut (Z for a vector; X, Y and Z for
// a replicated tensor) — the one at coordinate 0 of each.
func CountsAt(at Coord, split checkpoints.Split) bool {
	rows, cols := split.Axes()
	cuts := func(a checkpoints.Axis) bool { return rows == a || cols == a }
	return at.Data == 0 &&
		(at.X == 0 || cuts(checkpoints.AxisX)) &&
		(at.Y == 0 || cuts(checkpoints.AxisY)) &&
		(at.Z == 0 || split.ChunksZ())
}

// SumUnique returns the sum over the world of counted, each rank's sum of
// the values of the tensors whose copies it counts (CountsUnique): each
// distinct element once. Used for the global gradient norm.
func (g *Grid) SumUnique(b engine.Backend, counted float64) (float64, error) {
	vals := []float64{counted}
	if err := g.sumWorld(b, vals, true); err != nil {
		return 0, err
	}
	return vals[0], nil
}

// GradGroups are the groups a weight's gradient is summed over once a
// step, after the backward, by its split: first (nil for none) and then
// batch. The gradient of each copy is a partial sum over the tokens its
// rank saw, and over the part of the activations it met:
//
//   - a matrix's block is summed over the data replicas (its Z chunks
//     are reduce-scattered in the backward, engine/llama's zGrads);
//   - a vector's copies at one data·Z coordinate computed the same sum:
//     a vector over X scales the residual stream, replicated over Y; a
//     vector over Y meets a linear's output, summed over X before it. It
//     is summed over data·Z, whose ranks saw different tokens;
//   - a replicated tensor applied to every head met only its rank's heads,
//     split over Y: it is summed over Y first, then over data·Z.
func (g *Grid) GradGroups(split checkpoints.Split) (first, batch comm.Comm) {
	switch {
	case split.ChunksZ():
		return nil, g.Data
	case split == checkpoints.SplitReplicated:
		return g.Y, g.DataZ
	}
	return nil, g.DataZ
}

// sumWorld all-reduces vals over the world; a rank that does not
// contribute adds zeros.
func (g *Grid) sumWorld(b engine.Backend, vals []float64, contribute bool) error {
	if g.World.Size() == 1 || len(vals) == 0 {
		return nil
	}
	host := make([]float32, len(vals))
	if contribute {
		for i, v := range vals {
			host[i] = float32(v)
		}
	}
	t := b.Alloc(engine.F32, len(vals))
	defer b.Free(t)
	b.Upload(t, host)
	if err := g.World.AllReduce(t); err != nil {
		return fmt.Errorf("parallel: scalar sum: %w", err)
	}
	b.Download(host, t)
	for i, v := range host {
		vals[i] = float64(v)
	}
	return nil
}

// Any says, on every rank, whether any rank passed true: one scalar
// all-reduce over the world, for decisions every rank must take together
// (a signal seen by some ranks stops all of them at the same step).
func (g *Grid) Any(b engine.Backend, flag bool) (bool, error) {
	vals := []float64{0}
	if flag {
		vals[0] = 1
	}
	if err := g.sumWorld(b, vals, true); err != nil {
		return false, err
	}
	return vals[0] > 0.5, nil
}

// Agree makes every rank see a failure of any rank: each passes its own
// error (nil if it succeeded), and every rank gets an error if any rank
// had one — its own, or one saying how many others failed. It is
// collective over the world, for the points where only some ranks do
// something that can fail (rank 0 writing a checkpoint).
func (g *Grid) Agree(b engine.Backend, err error) error {
	vals := []float64{0}
	if err != nil {
		vals[0] = 1
	}
	if serr := g.sumWorld(b, vals, true); serr != nil {
		return errors.Join(err, serr)
	}
	if err != nil {
		return err
	}
	if n := int(math.Round(vals[0])); n > 0 {
		return fmt.Errorf("parallel: %d other rank(s) failed", n)
	}
	return nil
}
