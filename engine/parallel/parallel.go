// Package parallel places a rank in AxoNN's four-dimensional grid, Data × X
// × Y × Z (DESIGN.md, "AxoNN 4D algorithm"; engine/perfmodel's package
// documentation has the layout): its communicators and coordinates, which
// part of each Llama weight it holds (Shard), how those parts are read from
// and put back into full-shape tensors, and Launch, which runs a whole grid
// of ranks in this process.
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
		if len(s.Shape) != 2 {
			continue
		}
		sh := ShardAt(shape, 0, 0, 0, s.Name, s.Shape)
		r, c := sh.Row1-sh.Row0, sh.Col1-sh.Col0
		if (r*c)%shape.Z != 0 {
			return fmt.Errorf("parallel: grid %v: Z=%d does not divide %s's (x,y) block of %d×%d = %d elements", shape, shape.Z, s.Name, r, c, r*c)
		}
	}
	return nil
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

// CountsUnique reports whether this rank's squared gradient sums count in
// the global norm, for its Z-sharded matrices (every (x, y, z) once, data
// replicas not) and for its norm weights (one per x): SumUnique's rule.
func (g *Grid) CountsUnique() (matrices, norms bool) {
	matrices = g.At.Data == 0
	return matrices, matrices && g.At.Y == 0 && g.At.Z == 0
}

// SumUnique replaces vals by their sums over the ranks that hold distinct
// shards of the weights: weight is true for values of Z-sharded matrices
// (every (x, y, z) counts once; data replicas do not) and false for
// values of norm weights (one per x). Used for the global gradient norm.
func (g *Grid) SumUnique(b engine.Backend, matrices, norms float64) (float64, error) {
	vals := []float64{0, 0}
	if cm, cn := g.CountsUnique(); cm {
		vals[0] = matrices
		if cn {
			vals[1] = norms
		}
	}
	if err := g.sumWorld(b, vals, true); err != nil {
		return 0, err
	}
	return vals[0] + vals[1], nil
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
