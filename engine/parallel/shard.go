package parallel

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// ShardAt is the shard of a weight of the given full shape, split as its
// family declares it (checkpoints.Split), that the rank at (x, y, z) of a
// grid holds (ranks differing only in their data coordinate hold the
// same):
//
//   - a matrix W[out, in] keeps its (x, y) block: [out/Y, in/X] (rows
//     y·out/Y…, columns x·in/X…) when SplitRowsY, [out/X, in/Y] when
//     SplitRowsX. The block, flattened row-major, is split over Z as
//     comm.Chunk says;
//   - a vector, one row, keeps its columns' slice over X (SplitVectorX)
//     or Y (SplitVectorY), whole on every rank of the other axes;
//   - a replicated tensor is whole on every rank.
//
// The grid must divide the shape (Check).
func ShardAt(shape comm.Grid, x, y, z int, split checkpoints.Split, full []int) engine.Shard {
	if !split.Valid() {
		panic(fmt.Sprintf("parallel: a tensor of shape %v has no declared split", full))
	}
	rows, cols := engine.RowsCols(full)
	rowAxis, colAxis := split.Axes()
	cut := func(n int, a checkpoints.Axis) (int, int) {
		switch a {
		case checkpoints.AxisX:
			n /= shape.X
			return x * n, (x + 1) * n
		case checkpoints.AxisY:
			n /= shape.Y
			return y * n, (y + 1) * n
		}
		return 0, n
	}
	r0, r1 := cut(rows, rowAxis)
	c0, c1 := cut(cols, colAxis)
	off, n := 0, (r1-r0)*(c1-c0)
	if split.ChunksZ() {
		off, n = comm.Chunk(n, shape.Z, z)
	}
	return engine.Shard{Row0: r0, Row1: r1, Col0: c0, Col1: c1, Flat0: off, Flat1: off + n}
}

// Shard is ShardAt for this rank.
func (g *Grid) Shard(split checkpoints.Split, full []int) engine.Shard {
	return ShardAt(g.Shape(), g.At.X, g.At.Y, g.At.Z, split, full)
}

// LocalShape is the shape of the tensor a rank stores for a shard of a
// tensor of the given full shape: the block, of the full shape's rank,
// when it is whole, the flat chunk of a Z-split block otherwise.
func LocalShape(full []int, s engine.Shard) []int {
	rows, cols := s.Row1-s.Row0, s.Col1-s.Col0
	if s.Flat0 != 0 || s.Flat1 != rows*cols {
		return []int{s.Elements()}
	}
	if len(full) < 2 { // a vector is one row
		return []int{cols}
	}
	return []int{rows, cols}
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

// ReadShard reads a shard of the named tensor of the given full shape
// (a vector is one row). It reads only the rows of the (x, y) block that
// hold the shard's elements, and of those only the block's columns; a
// vector, small, is read whole and cut.
//
// A reader that can read a part of a block (checkpoints.Set's ReadBlock)
// reads exactly the shard's elements, from wherever they are stored.
func ReadShard(r SliceReader, name string, full []int, s engine.Shard) ([]float32, error) {
	if br, ok := r.(interface {
		ReadBlock(name string, r0, r1, c0, c1, flat0, flat1 int) ([]float32, error)
	}); ok {
		return br.ReadBlock(name, s.Row0, s.Row1, s.Col0, s.Col1, s.Flat0, s.Flat1)
	}
	if len(full) < 2 { // SliceReader reads 2-D tensors' slices only
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
