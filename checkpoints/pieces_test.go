package checkpoints

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
)

// writePieces stores full (rows × cols) as the pieces of a grid of
// rowParts × colParts boxes, each box's elements split into zParts flat
// chunks, one file per chunk position (as ranks would), and returns the
// piece map.
func writePieces(t *testing.T, dir, name string, full []float32, rows, cols, rowParts, colParts, zParts int, dtype DType) PieceMap {
	t.Helper()
	st := ShardedTensor{Shape: []int{rows, cols}}
	if rows == 1 {
		st.Shape = []int{cols}
	}
	r, c := rows/rowParts, cols/colParts
	for i := range rowParts {
		for j := range colParts {
			vol := r * c
			per := (vol + zParts - 1) / zParts
			for z := range zParts {
				f0, f1 := min(z*per, vol), min((z+1)*per, vol)
				if f0 == f1 {
					continue
				}
				var vals []float32
				for k := f0; k < f1; k++ {
					vals = append(vals, full[(i*r+k/c)*cols+j*c+k%c])
				}
				file := fmt.Sprintf("rank-%d-%d-%d.safetensors", i, j, z)
				specs := []StreamTensor{{Name: name, Shape: []int{len(vals)}}}
				if _, err := WriteStream(filepath.Join(dir, file), specs, dtype, nil, func(_ int, put func([]float32) error) error { return put(vals) }); err != nil {
					t.Fatal(err)
				}
				off := Layout(specs, dtype, nil)[0].Offset
				p := Piece{File: file, Offset: off, DType: dtype.String(), Offsets: []int{i * r, j * c}, Extents: []int{r, c}, Flat: [2]int64{int64(f0), int64(f1)}}
				if rows == 1 {
					p.Offsets, p.Extents = []int{j * c}, []int{c}
				}
				st.Pieces = append(st.Pieces, p)
			}
		}
	}
	return PieceMap{name: st}
}

// writeGridPieces is writePieces laid out by a PieceGrid: chunk k of box
// (i, j) in piece file (k·rowParts + i)·colParts + j.
func writeGridPieces(t *testing.T, dir, name string, full []float32, rows, cols, rowParts, colParts, zParts int, dtype DType) (PieceMap, []string) {
	t.Helper()
	g := &PieceGrid{Parts: [3]int{rowParts, colParts, zParts}, Strides: [3]int{colParts, 1, rowParts * colParts}, DType: dtype.String()}
	st := ShardedTensor{Shape: []int{rows, cols}, Grid: g}
	if rows == 1 {
		st.Shape = []int{cols}
	}
	files := make([]string, rowParts*colParts*zParts)
	for i := range files {
		files[i] = fmt.Sprintf("piece-%d.safetensors", i)
	}
	r, c := rows/rowParts, cols/colParts
	for i := range rowParts {
		for j := range colParts {
			for z := range zParts {
				f0, f1 := g.chunk(int64(r*c), z)
				if f0 == f1 {
					continue
				}
				var vals []float32
				for k := int(f0); k < int(f1); k++ {
					vals = append(vals, full[(i*r+k/c)*cols+j*c+k%c])
				}
				specs := []StreamTensor{{Name: name, Shape: []int{len(vals)}}, {Name: "other", Shape: []int{3}}}
				if _, err := WriteStream(filepath.Join(dir, files[g.file(i, j, z)]), specs, dtype, nil, func(k int, put func([]float32) error) error {
					if k == 1 {
						return put([]float32{1, 2, 3})
					}
					return put(vals)
				}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return PieceMap{name: st}, files
}

// TestPiecesReadAnyBlock: a tensor stored as pieces on one grid (listed,
// or laid out by a PieceGrid) reads, block by block as another grid's
// ranks would read it, the values of the full tensor, touching exactly
// the bytes asked for.
func TestPiecesReadAnyBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 12, 8
	full := make([]float32, rows*cols)
	for i := range full {
		full[i] = float32(rng.NormFloat64())
	}
	for n, w := range [][3]int{{1, 1, 1}, {2, 2, 2}, {3, 4, 5}, {1, 2, 7}, {4, 1, 3}, {1, 1, 1}, {2, 2, 2}, {3, 4, 5}, {1, 2, 7}, {4, 1, 3}} {
		dir := t.TempDir()
		var m PieceMap
		var files []string
		if n < 5 {
			m = writePieces(t, dir, "w", full, rows, cols, w[0], w[1], w[2], DTypeF32)
		} else {
			m, files = writeGridPieces(t, dir, "w", full, rows, cols, w[0], w[1], w[2], DTypeF32)
		}
		set, err := OpenPieces(dir, m, files, nil)
		if err != nil {
			t.Fatal(err)
		}
		all, err := set.ReadFloat32("w")
		if err != nil || !slices.Equal(all, full) {
			t.Fatalf("grid %v: whole tensor: %v", w, err)
		}
		for _, r := range [][3]int{{2, 1, 3}, {1, 4, 1}, {4, 2, 2}, {3, 2, 5}} {
			br, bc := rows/r[0], cols/r[1]
			for i := range r[0] {
				for j := range r[1] {
					vol := br * bc
					per := (vol + r[2] - 1) / r[2]
					for z := range r[2] {
						f0, f1 := min(z*per, vol), min((z+1)*per, vol)
						before := set.BytesRead()
						got, err := set.ReadBlock("w", i*br, (i+1)*br, j*bc, (j+1)*bc, f0, f1)
						if err != nil {
							t.Fatal(err)
						}
						if n := set.BytesRead() - before; n != int64(4*(f1-f0)) {
							t.Errorf("grid %v → %v: read %d bytes for %d elements", w, r, n, f1-f0)
						}
						for k := f0; k < f1; k++ {
							if want := full[(i*br+k/bc)*cols+j*bc+k%bc]; got[k-f0] != want {
								t.Fatalf("grid %v → %v block (%d,%d) chunk %d: element %d is %v, want %v", w, r, i, j, z, k, got[k-f0], want)
							}
						}
					}
				}
			}
		}
		if err := set.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPieceMapCheck: maps that would store an element twice, or none,
// or outside the tensor, are refused.
func TestPieceMapCheck(t *testing.T) {
	good := func() PieceMap {
		return PieceMap{"w": {Shape: []int{4, 4}, Pieces: []Piece{
			{File: "a", DType: "F32", Offsets: []int{0, 0}, Extents: []int{2, 4}, Flat: [2]int64{0, 8}},
			{File: "b", DType: "F32", Offsets: []int{2, 0}, Extents: []int{2, 4}, Flat: [2]int64{0, 5}},
			{File: "c", DType: "F32", Offsets: []int{2, 0}, Extents: []int{2, 4}, Flat: [2]int64{5, 8}},
		}}}
	}
	if err := good().Check(nil); err != nil {
		t.Fatal(err)
	}
	for name, breakIt := range map[string]func(m PieceMap){
		"gap in a box":     func(m PieceMap) { m["w"].Pieces[2].Flat[0] = 6 },
		"overlap in a box": func(m PieceMap) { m["w"].Pieces[2].Flat[0] = 4 },
		"box outside":      func(m PieceMap) { m["w"].Pieces[1].Offsets[0] = 3 },
		"missing box":      func(m PieceMap) { m["w"].Pieces[0].Extents[0] = 1; m["w"].Pieces[0].Flat[1] = 4 },
		"path":             func(m PieceMap) { m["w"].Pieces[0].File = "../a" },
		"dtype":            func(m PieceMap) { m["w"].Pieces[0].DType = "I64" },
		"rank":             func(m PieceMap) { m["w"].Pieces[0].Offsets = []int{0} },
		"negative offset":  func(m PieceMap) { m["w"].Pieces[0].Offset = -1 },
	} {
		m := good()
		breakIt(m)
		if err := m.Check(nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Crossing boxes (not a grid).
	m := PieceMap{"w": {Shape: []int{2, 2}, Pieces: []Piece{
		{File: "a", DType: "F32", Offsets: []int{0, 0}, Extents: []int{1, 2}, Flat: [2]int64{0, 2}},
		{File: "b", DType: "F32", Offsets: []int{1, 0}, Extents: []int{1, 1}, Flat: [2]int64{0, 1}},
		{File: "c", DType: "F32", Offsets: []int{1, 1}, Extents: []int{1, 1}, Flat: [2]int64{0, 1}},
	}}}
	if err := m.Check(nil); err == nil {
		t.Error("boxes that are no grid: accepted")
	}
	// Grids: two pieces in one file, a file out of range, parts that do
	// not divide the shape.
	files := []string{"a", "b", "c", "d"}
	for name, g := range map[string]PieceGrid{
		"one file twice": {Parts: [3]int{1, 2, 2}, Strides: [3]int{0, 1, 1}, DType: "F32"},
		"out of range":   {Parts: [3]int{1, 2, 2}, Base: 1, Strides: [3]int{0, 1, 2}, DType: "F32"},
		"not dividing":   {Parts: [3]int{3, 1, 1}, Strides: [3]int{1, 0, 0}, DType: "F32"},
		"bad file name":  {Parts: [3]int{1, 1, 1}, DType: "F32"},
	} {
		fs := files
		if name == "bad file name" {
			fs = []string{"../a"}
		}
		if err := (PieceMap{"w": {Shape: []int{2, 4}, Grid: &g}}).Check(fs); err == nil {
			t.Errorf("grid %s: accepted", name)
		}
	}
	if err := (PieceMap{"w": {Shape: []int{2, 4}, Grid: &PieceGrid{Parts: [3]int{1, 2, 2}, Strides: [3]int{0, 1, 2}, DType: "F32"}}}).Check(files); err != nil {
		t.Error(err)
	}
}

// FuzzPieceMap: no input makes the piece map's check, or indexing a map
// that passes it, panic or allocate without bound.
func FuzzPieceMap(f *testing.F) {
	f.Add([]byte(`{"w":{"shape":[4,4],"pieces":[{"file":"a","offset":8,"dtype":"F32","offsets":[0,0],"extents":[4,4],"flat":[0,16]}]}}`))
	f.Add([]byte(`{"v":{"shape":[6],"pieces":[{"file":"a","offset":8,"dtype":"BF16","offsets":[0],"extents":[3],"flat":[0,3]},{"file":"b","offset":80,"dtype":"F32","offsets":[3],"extents":[3],"flat":[0,3]}]}}`))
	f.Add([]byte(`{"w":{"shape":[4,6],"grid":{"parts":[2,3,2],"base":0,"strides":[3,1,6],"dtype":"F32"}},"v":{"shape":[6],"grid":{"parts":[1,3,1],"base":12,"strides":[0,1,0],"dtype":"F32"}}}`))
	files := make([]string, 16)
	for i := range files {
		files[i] = fmt.Sprintf("f%d", i)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m PieceMap
		if json.Unmarshal(b, &m) != nil || m.Check(files) != nil {
			return
		}
		table := make([]*lazyFile, len(files))
		for name, st := range m {
			pt := newPieceTensor(name, st, func(string) *lazyFile { return &lazyFile{} }, table)
			if pt.grid == nil && len(pt.cells) != len(pt.rowStarts)*len(pt.colStarts) {
				t.Fatalf("%s: %d cells", name, len(pt.cells))
			}
		}
	})
}
