package finetune

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestPiecesOfEverySplit: for a tensor of every split kind — the vector
// over Y and the replicated kinds no family uses yet included — and every
// grid of up to two ranks an axis, the pieces each grid position writes
// (positionPieces), read back through the manifest's map of them
// (pieceMap, checked), rebuild every tensor exactly.
func TestPiecesOfEverySplit(t *testing.T) {
	specs := []checkpoints.TensorSpec{
		{Name: "rows.y", Shape: []int{12, 8}, Split: checkpoints.SplitRowsY},
		{Name: "rows.x", Shape: []int{8, 12}, Split: checkpoints.SplitRowsX},
		{Name: "vector.x", Shape: []int{8}, Split: checkpoints.SplitVectorX},
		{Name: "vector.y", Shape: []int{12}, Split: checkpoints.SplitVectorY},
		{Name: "replicated.vector", Shape: []int{6}, Split: checkpoints.SplitReplicated},
		{Name: "replicated.matrix", Shape: []int{3, 4}, Split: checkpoints.SplitReplicated},
	}
	var params []*engine.Param
	full := map[string][]float32{}
	for i, s := range specs {
		params = append(params, &engine.Param{Name: s.Name, Full: s.Shape, Split: s.Split, Shard: engine.WholeShard(engine.RowsCols(s.Shape))})
		v := make([]float32, s.Elements())
		for j := range v {
			v[j] = float32(1000*i + j)
		}
		full[s.Name] = v
	}
	for _, x := range []int{1, 2} {
		for _, y := range []int{1, 2} {
			for _, z := range []int{1, 2} {
				shape := comm.Grid{Data: 1, X: x, Y: y, Z: z}
				t.Run(fmt.Sprint(shape), func(t *testing.T) { checkPieces(t, shape, params, full) })
			}
		}
	}
}

// checkPieces writes every position's pieces of params (values from
// full) and reads each tensor back through the piece map.
func checkPieces(t *testing.T, shape comm.Grid, params []*engine.Param, full map[string][]float32) {
	dir := t.TempDir()
	tensors, files := pieceMap(shape, params, false)
	if err := tensors.Check(files); err != nil {
		t.Fatal(err)
	}
	for pos := range shape.X * shape.Y * shape.Z {
		_, x, y, z := shape.Coords(pos)
		ps := positionPieces(shape, x, y, z, params)
		_, err := checkpoints.WriteStream(filepath.Join(dir, files[pos]), streamSpecs(ps), checkpoints.DTypeF32, nil,
			func(i int, put func([]float32) error) error {
				p := params[ps[i].param]
				return put(parallel.Extract(ps[i].shard, p.Full[len(p.Full)-1], full[p.Name]))
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	set, err := checkpoints.OpenPieces(dir, tensors, files, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, p := range params {
		got, err := set.ReadFloat32(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := numtest.Equal(got, full[p.Name]); err != nil {
			t.Errorf("%s (%v): read back: %v", p.Name, p.Split, err)
		}
	}
}
