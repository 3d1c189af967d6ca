package perfmodel

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
)

// The communicator groups, as Collective.Group names them and as
// engine/comm's SplitGrid names its communicators: one per grid axis, and
// data-z, the Data·Z ranks that split the batch between them (over which
// norm-weight gradients are summed).
const (
	GroupX     = "x"
	GroupY     = "y"
	GroupZ     = "z"
	GroupData  = "data"
	GroupDataZ = "data-z"
)

// Groups returns the group names: the axes from innermost (fastest-varying
// rank) to outermost, then data-z.
func Groups() []string { return []string{GroupX, GroupY, GroupZ, GroupData, GroupDataZ} }

// A Grid is an AxoNN 4D process grid: Data × X × Y × Z ranks. Ranks are
// numbered with X fastest, then Y, then Z, then Data:
//
//	rank = x + X·(y + Y·(z + Z·d))
//
// so X groups are consecutive ranks — the most likely to share a node — and
// data-parallel groups the most spread out.
type Grid struct {
	Data int `json:"data"`
	X    int `json:"x"`
	Y    int `json:"y"`
	Z    int `json:"z"`
}

func (g Grid) String() string {
	return fmt.Sprintf("dp=%d x=%d y=%d z=%d", g.Data, g.X, g.Y, g.Z)
}

// ParseGrid reads a grid as the CLI's --parallel gives it, such as
// "dp=2,x=2,y=1,z=2" (comm.ParseGrid).
func ParseGrid(s string) (Grid, error) {
	g, err := comm.ParseGrid(s)
	return Grid{Data: g.Data, X: g.X, Y: g.Y, Z: g.Z}, err
}

// Size is the number of ranks.
func (g Grid) Size() int { return g.Data * g.X * g.Y * g.Z }

// GroupSize is the number of ranks in one of the named groups.
func (g Grid) GroupSize(group string) int {
	switch group {
	case GroupDataZ:
		return g.Data * g.Z
	case GroupX:
		return g.X
	case GroupY:
		return g.Y
	case GroupZ:
		return g.Z
	case GroupData:
		return g.Data
	}
	panic("perfmodel: unknown group " + group)
}

// Stride is the rank distance between neighbours in one of the named
// groups. (A data-z group is Z·Data ranks X·Y apart: with X and Y fixed, z
// and d together count up in steps of X·Y.)
func (g Grid) Stride(group string) int {
	switch group {
	case GroupDataZ:
		return g.X * g.Y
	case GroupX:
		return 1
	case GroupY:
		return g.X
	case GroupZ:
		return g.X * g.Y
	case GroupData:
		return g.X * g.Y * g.Z
	}
	panic("perfmodel: unknown group " + group)
}

// InterNode reports whether the named groups cross node boundaries
// when ranks are packed onto nodes of nodeSize devices in rank order. A
// group's ranks span stride·size consecutive ranks; it stays in one node
// when that span divides the node size (so no group straddles two nodes),
// or when the whole job fits in one node. A group of one rank uses no
// link.
func (g Grid) InterNode(group string, nodeSize int) bool {
	p := g.GroupSize(group)
	if p == 1 || g.Size() <= nodeSize {
		return false
	}
	span := g.Stride(group) * p
	return span > nodeSize || nodeSize%span != 0
}

// Validate checks that the model's dimensions split over the grid the way
// the 4D engine lays them out (see the package documentation):
//
//   - X divides hidden_size: the residual stream, every norm and every
//     linear's hidden-size side are split over X.
//   - Y divides num_attention_heads and num_key_value_heads (each rank
//     attends with whole heads, and its query heads' key/value heads are on
//     the same rank), intermediate_size (gate, up and down) and vocab_size
//     (the vocabulary-parallel embedding, LM head and cross-entropy).
//   - Z divides every weight's (x, y) block, (out/Y)·(in/X) elements, which
//     is flattened and split evenly over Z: q_proj, k_proj, v_proj, o_proj,
//     gate_proj, up_proj, down_proj and the embedding/LM head. Norm weights
//     are not split over Z.
//
// Data has no constraint from the model (the batch's is checked by the
// planner: its sequences split over Data·Z).
//
// The rules are the engine's own (parallel.Check), so that the planner
// never proposes a grid the engine refuses, nor the reverse.
func (g Grid) Validate(cfg *checkpoints.Config) error {
	return parallel.Check(cfg, comm.Grid{Data: g.Data, X: g.X, Y: g.Y, Z: g.Z})
}

// Grids lists every grid of exactly gpus ranks that Validate accepts, in
// lexicographic order of (Data, X, Y, Z).
func Grids(cfg *checkpoints.Config, gpus int) []Grid {
	var out []Grid
	for _, d := range divisors(gpus) {
		for _, x := range divisors(gpus / d) {
			for _, y := range divisors(gpus / d / x) {
				g := Grid{Data: d, X: x, Y: y, Z: gpus / d / x / y}
				if g.Validate(cfg) == nil {
					out = append(out, g)
				}
			}
		}
	}
	return out
}

// divisors returns n's positive divisors in increasing order.
func divisors(n int) []int {
	var small, large []int
	for i := 1; i*i <= n; i++ {
		if n%i == 0 {
			small = append(small, i)
			if i != n/i {
				large = append(large, n/i)
			}
		}
	}
	for i := len(large) - 1; i >= 0; i-- {
		small = append(small, large[i])
	}
	return small
}

// A weight is one Z-sharded matrix W[out, in] of the model, as its
// family declares it (checkpoints.TensorSpec): its role, and its split,
// which says which axes its output and input are split over.
type weight struct {
	role    checkpoints.Role
	split   checkpoints.Split
	out, in int
}

// declared lists the model's tensors as its family declares them, a
// decoder layer's once (the layers are alike).
func declared(cfg *checkpoints.Config) []checkpoints.TensorSpec {
	c := cfg.Clone()
	c.NumHiddenLayers = min(c.NumHiddenLayers, 1)
	return c.TensorSpecs()
}

// weights lists the model's matrices, in the declaration's order: the
// tensors whose (x, y) blocks are split over Z.
func weights(cfg *checkpoints.Config) []weight {
	var ws []weight
	for _, s := range declared(cfg) {
		if s.Split.ChunksZ() {
			ws = append(ws, weight{role: s.Role, split: s.Split, out: s.Shape[0], in: s.Shape[1]})
		}
	}
	return ws
}

// axisSize is the number of ranks along a model-parallel axis (1 for
// none).
func (g Grid) axisSize(a checkpoints.Axis) int {
	switch a {
	case checkpoints.AxisX:
		return g.X
	case checkpoints.AxisY:
		return g.Y
	}
	return 1
}

// axisGroup is the group of an axis: "x", "y", or "" for none (whose
// size is 1).
func axisGroup(a checkpoints.Axis) string {
	switch a {
	case checkpoints.AxisX:
		return GroupX
	case checkpoints.AxisY:
		return GroupY
	}
	return ""
}

// groups are the groups of the weight's input (its columns' axis) and
// output (its rows').
func (w weight) groups() (in, out string) {
	rows, cols := w.split.Axes()
	return axisGroup(cols), axisGroup(rows)
}

// block is the shape of the weight's (x, y) block, before the Z split:
// [out/Y, in/X] for SplitRowsY, [out/X, in/Y] for SplitRowsX.
func (w weight) block(g Grid) (rows, cols int) {
	ra, ca := w.split.Axes()
	return w.out / g.axisSize(ra), w.in / g.axisSize(ca)
}

// blockElements is out·in/(X·Y), the (x, y) block's size.
func (w weight) blockElements(g Grid) int64 {
	r, c := w.block(g)
	return int64(r) * int64(c)
}
