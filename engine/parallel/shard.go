package parallel

import (
	"fmt"
	"strings"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// Transposed reports whether the named weight is one of AxoNN's
// "transposed" linears, o_proj and down_proj: W[out, in] cut into
// [out/X, in/Y] blocks, taking their input split over Y and giving their
// output split over X, so that they chain after q/k/v and gate/up without
// a re-layout.
func Transposed(name string) bool {
	return strings.HasSuffix(name, "self_attn.o_proj.weight") || strings.HasSuffix(name, "mlp.down_proj.weight")
}

// ShardAt is the shard of the named weight of the given full shape that
// the rank at (x, y, z) of a grid holds (ranks differing only in their
// data coordinate hold the same):
//
//   - a matrix W[out, in] keeps the (x, y) block [out/Y, in/X] (rows
//     y·out/Y…, columns x·in/X…), or [out/X, in/Y] when Transposed; the
//     embedding [vocab, hidden] and LM head are plain matrices, vocabulary
//     over Y and hidden over X. The block, flattened row-major, is split
//     over Z as comm.Chunk says;
//   - a vector (an RMSNorm weight [hidden]) keeps columns x·hidden/X…,
//     whole, on every Y and Z rank: it scales the residual stream, which
//     is split over X and replicated over Y.
//
// The grid must divide the shape (Check).
func ShardAt(shape comm.Grid, x, y, z int, name string, full []int) engine.Shard {
	if len(full) == 1 {
		n := full[0] / shape.X
		return engine.Shard{Row0: 0, Row1: 1, Col0: x * n, Col1: (x + 1) * n, Flat0: 0, Flat1: n}
	}
	rowAxis, colAxis := y, x
	rowParts, colParts := shape.Y, shape.X
	if Transposed(name) {
		rowAxis, colAxis = x, y
		rowParts, colParts = shape.X, shape.Y
	}
	r, c := full[0]/rowParts, full[1]/colParts
	off, n := comm.Chunk(r*c, shape.Z, z)
	return engine.Shard{Row0: rowAxis * r, Row1: (rowAxis + 1) * r, Col0: colAxis * c, Col1: (colAxis + 1) * c, Flat0: off, Flat1: off + n}
}

// Shard is ShardAt for this rank.
func (g *Grid) Shard(name string, full []int) engine.Shard {
	return ShardAt(g.Shape(), g.At.X, g.At.Y, g.At.Z, name, full)
}

// LocalShape is the shape of the tensor a rank stores for a shard: the
// block [rows, cols] when it is whole (Z = 1), the flat chunk otherwise,
// and a vector's slice.
func LocalShape(full []int, s engine.Shard) []int {
	if len(full) == 1 {
		return []int{s.Col1 - s.Col0}
	}
	rows, cols := s.Row1-s.Row0, s.Col1-s.Col0
	if s.Flat0 == 0 && s.Flat1 == rows*cols {
		return []int{rows, cols}
	}
	return []int{s.Elements()}
}

// Extract returns the shard's values out of the full tensor's (row-major,
// with fullCols columns; a vector has one row).
func Extract(s engine.Shard, fullCols int, full []float32) []float32 {
	out := make([]float32, 0, s.Elements())
	forEachRun(s, fullCols, func(fullOff, partOff, n int) {
		out = append(out, full[fullOff:fullOff+n]...)
	})
	return out
}

// Place writes a shard's values into the full tensor, Extract's inverse.
func Place(s engine.Shard, fullCols int, full, part []float32) {
	forEachRun(s, fullCols, func(fullOff, partOff, n int) {
		copy(full[fullOff:fullOff+n], part[partOff:partOff+n])
	})
}

// forEachRun calls fn for each run of the shard that is contiguous in the
// full tensor: a piece of one row of the (x, y) block.
func forEachRun(s engine.Shard, fullCols int, fn func(fullOff, partOff, n int)) {
	cols := s.Col1 - s.Col0
	for f := s.Flat0; f < s.Flat1; {
		r, c := f/cols, f%cols
		n := min(cols-c, s.Flat1-f)
		fn((s.Row0+r)*fullCols+s.Col0+c, f-s.Flat0, n)
		f += n
	}
}

// A SliceReader reads rows and columns of a 2-D tensor by name, as
// checkpoints.Set and checkpoints.File do, and whole tensors.
type SliceReader interface {
	ReadSlice(name string, r0, r1, c0, c1 int) ([]float32, error)
	ReadFloat32(name string) ([]float32, error)
}

// ReadShard reads a shard of the named tensor of the given full shape. Of
// a matrix it reads only the rows of the (x, y) block that hold the Z
// chunk, and of those only the block's columns; a vector (a norm weight,
// small) is read whole and cut.
//
// A reader that can read a part of a block (checkpoints.Set's ReadBlock)
// reads exactly the shard's elements, from wherever they are stored.
func ReadShard(r SliceReader, name string, full []int, s engine.Shard) ([]float32, error) {
	if br, ok := r.(interface {
		ReadBlock(name string, r0, r1, c0, c1, flat0, flat1 int) ([]float32, error)
	}); ok {
		return br.ReadBlock(name, s.Row0, s.Row1, s.Col0, s.Col1, s.Flat0, s.Flat1)
	}
	if len(full) == 1 {
		v, err := r.ReadFloat32(name)
		if err != nil {
			return nil, err
		}
		if len(v) != full[0] {
			return nil, fmt.Errorf("parallel: tensor %q has %d elements, want %d", name, len(v), full[0])
		}
		return Extract(s, full[0], v), nil
	}
	cols := s.Col1 - s.Col0
	r0, r1 := s.Flat0/cols, (s.Flat1+cols-1)/cols
	rows, err := r.ReadSlice(name, s.Row0+r0, s.Row0+r1, s.Col0, s.Col1)
	if err != nil {
		return nil, err
	}
	skip := s.Flat0 - r0*cols
	return rows[skip : skip+s.Elements()], nil
}
