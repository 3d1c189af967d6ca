package checkpoints

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
)

// A sharded checkpoint stores each full tensor as pieces in safetensors
// files, each piece written by the rank that holds it (ARCHITECTURE.md,
// "Checkpoints", has the format). A Piece is one of them: a box of the
// full tensor (Offsets, Extents: its first index and its size along each
// dimension) of which the elements Flat[0] ≤ k < Flat[1], counted
// row-major within the box, are stored back to back in File from byte
// Offset, little-endian in DType.
type Piece struct {
	File    string   `json:"file"`
	Offset  int64    `json:"offset"`
	DType   string   `json:"dtype"`
	Offsets []int    `json:"offsets"`
	Extents []int    `json:"extents"`
	Flat    [2]int64 `json:"flat"`
}

// Elements is the number of elements the piece stores.
func (p Piece) Elements() int64 { return p.Flat[1] - p.Flat[0] }

// A ShardedTensor is a full tensor's shape and its pieces: listed one by
// one (Pieces), or, for a grid's regular layout, described by a
// PieceGrid (Grid), which stays a few numbers however many ranks wrote
// the tensor.
type ShardedTensor struct {
	Shape  []int      `json:"shape"`
	Pieces []Piece    `json:"pieces,omitempty"`
	Grid   *PieceGrid `json:"grid,omitempty"`
}

// A PieceGrid is the regular layout of a tensor over a grid's files: the
// tensor is cut into Parts[0] × Parts[1] equal boxes (row ranges × column
// ranges; a vector is one row, Parts[0] = 1), each box's elements, taken
// row-major, into Parts[2] flat chunks of ⌈volume / Parts[2]⌉ elements
// (the last ones shorter; an empty one is not stored). Chunk k of box
// (i, j) is the tensor named like the full one in the piece file
// files[Base + i·Strides[0] + j·Strides[1] + k·Strides[2]] (the
// manifest's "piece_files"), in DType, at the offset that file's
// safetensors header gives.
type PieceGrid struct {
	Parts   [3]int `json:"parts"`
	Base    int    `json:"base"`
	Strides [3]int `json:"strides"`
	DType   string `json:"dtype"`
}

// chunk is the flat range of chunk k of a box of vol elements.
func (g *PieceGrid) chunk(vol int64, k int) (int64, int64) {
	per := (vol + int64(g.Parts[2]) - 1) / int64(g.Parts[2])
	return min(int64(k)*per, vol), min(int64(k+1)*per, vol)
}

// file is the index into the piece files of chunk k of box (i, j).
func (g *PieceGrid) file(i, j, k int) int {
	return g.Base + i*g.Strides[0] + j*g.Strides[1] + k*g.Strides[2]
}

// A PieceMap maps every full tensor of a sharded checkpoint, by name, to
// its pieces.
type PieceMap map[string]ShardedTensor

// Limits of a piece map, so that no input sizes anything beyond them.
const (
	maxPieceDims     = 2
	maxPiecesTensor  = 1 << 20
	maxTensorElement = 1 << 46
)

// Check validates a piece map as a reader must before it reads through
// it: every tensor has a non-empty name and a shape of rank 1 or 2; every
// piece names a plain file, a supported dtype, a non-negative offset and
// a box inside the shape with a flat range inside the box; and the pieces
// of each tensor store each of its elements exactly once: the distinct
// boxes form a grid (their row ranges tile the rows, their column ranges
// the columns, and each cell of that grid is one box), and the flat
// ranges of the pieces of each box tile the box.
//
// A tensor laid out by a PieceGrid needs files, the piece files its
// indices name: every piece's index must fall among them, and no two
// pieces of one tensor may share a file (a file holds one piece of a
// tensor, by the tensor's name).
func (m PieceMap) Check(files []string) error {
	if len(m) == 0 {
		return errors.New("no tensors")
	}
	for i, f := range files {
		if !plainFile(f) {
			return fmt.Errorf("piece file %d: %q is not a plain file name", i, f)
		}
	}
	checked := map[string]bool{} // grids already checked, by shape and grid
	for _, name := range slices.Sorted(maps.Keys(m)) {
		t := m[name]
		if t.Grid != nil {
			key := fmt.Sprint(t.Shape, *t.Grid)
			if checked[key] {
				continue
			}
			checked[key] = true
		}
		if err := t.check(len(files)); err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		if name == "" || name == metadataKey {
			return fmt.Errorf("tensor %q: invalid name", name)
		}
	}
	return nil
}

func plainFile(f string) bool {
	return f != "" && f != "." && f != ".." && !strings.ContainsAny(f, `/\`+"\x00")
}

func (t ShardedTensor) check(files int) error {
	if len(t.Shape) < 1 || len(t.Shape) > maxPieceDims {
		return fmt.Errorf("shape %v: want 1 or 2 dimensions", t.Shape)
	}
	total := int64(1)
	for _, d := range t.Shape {
		if d < 1 || int64(d) > maxTensorElement/total {
			return fmt.Errorf("shape %v out of range", t.Shape)
		}
		total *= int64(d)
	}
	if t.Grid != nil {
		if t.Pieces != nil {
			return errors.New("both pieces and a grid")
		}
		return t.Grid.check(t.Shape, files)
	}
	if len(t.Pieces) == 0 || len(t.Pieces) > maxPiecesTensor {
		return fmt.Errorf("%d pieces", len(t.Pieces))
	}
	rows, cols := shape2(t.Shape)
	boxes := map[[4]int][][2]int64{}
	for i, p := range t.Pieces {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("piece %d: %s", i, fmt.Sprintf(format, args...))
		}
		if !plainFile(p.File) {
			return bad("file %q is not a plain file name", p.File)
		}
		if _, err := parseHeaderDType(p.DType); err != nil {
			return bad("%v", err)
		}
		if p.Offset < 0 || p.Offset > math.MaxInt64/2 {
			return bad("offset %d", p.Offset)
		}
		if len(p.Offsets) != len(t.Shape) || len(p.Extents) != len(t.Shape) {
			return bad("offsets %v and extents %v do not match shape %v", p.Offsets, p.Extents, t.Shape)
		}
		for d := range t.Shape {
			if p.Offsets[d] < 0 || p.Extents[d] < 1 || p.Offsets[d] > t.Shape[d]-p.Extents[d] {
				return bad("box at %v of %v is outside shape %v", p.Offsets, p.Extents, t.Shape)
			}
		}
		box := box2(p)
		volume := int64(box[1]) * int64(box[3])
		if p.Flat[0] < 0 || p.Flat[0] >= p.Flat[1] || p.Flat[1] > volume {
			return bad("flat range %v outside the box's %d elements", p.Flat, volume)
		}
		boxes[box] = append(boxes[box], p.Flat)
	}
	var rowCuts, colCuts [][2]int
	for box, flats := range boxes {
		slices.SortFunc(flats, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
		at := int64(0)
		for _, f := range flats {
			if f[0] != at {
				return fmt.Errorf("the pieces of the box at [%d %d] do not tile it: a gap or overlap at element %d", box[0], box[2], at)
			}
			at = f[1]
		}
		if at != int64(box[1])*int64(box[3]) {
			return fmt.Errorf("the pieces of the box at [%d %d] store %d of its %d elements", box[0], box[2], at, int64(box[1])*int64(box[3]))
		}
		rowCuts = append(rowCuts, [2]int{box[0], box[1]})
		colCuts = append(colCuts, [2]int{box[2], box[3]})
	}
	nr, err := tiling(rowCuts, rows)
	if err != nil {
		return fmt.Errorf("rows: %w", err)
	}
	nc, err := tiling(colCuts, cols)
	if err != nil {
		return fmt.Errorf("columns: %w", err)
	}
	if len(boxes) != nr*nc {
		return fmt.Errorf("%d boxes do not form a grid of %d×%d", len(boxes), nr, nc)
	}
	return nil
}

func (g *PieceGrid) check(shape []int, files int) error {
	rows, cols := shape2(shape)
	r, c, z := g.Parts[0], g.Parts[1], g.Parts[2]
	switch {
	case r < 1 || c < 1 || z < 1 || int64(r)*int64(c)*int64(z) > maxPiecesTensor:
		return fmt.Errorf("grid of %v parts", g.Parts)
	case rows%r != 0 || cols%c != 0:
		return fmt.Errorf("grid of %d×%d boxes does not divide shape %v", r, c, shape)
	case g.Base < 0 || g.Base >= files:
		return fmt.Errorf("grid base %d outside the %d piece files", g.Base, files)
	}
	for _, st := range g.Strides {
		if st < -files || st > files {
			return fmt.Errorf("grid strides %v", g.Strides)
		}
	}
	if _, err := parseHeaderDType(g.DType); err != nil {
		return err
	}
	vol := int64(rows/r) * int64(cols/c)
	seen := make(map[int]bool, r*c*z)
	for i := range r {
		for j := range c {
			for k := range z {
				if f0, f1 := g.chunk(vol, k); f0 == f1 {
					continue
				}
				f := g.file(i, j, k)
				if f < 0 || f >= files {
					return fmt.Errorf("piece (%d, %d, %d) in piece file %d, outside the %d", i, j, k, f, files)
				}
				if seen[f] {
					return fmt.Errorf("two pieces in piece file %d", f)
				}
				seen[f] = true
			}
		}
	}
	return nil
}

// tiling checks that the distinct ranges [start, start+length) tile
// [0, n) and returns how many there are.
func tiling(ranges [][2]int, n int) (int, error) {
	slices.SortFunc(ranges, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	ranges = slices.Compact(ranges)
	at := 0
	for _, r := range ranges {
		if r[0] != at {
			return 0, fmt.Errorf("ranges do not tile 0…%d at %d", n, at)
		}
		at = r[0] + r[1]
	}
	if at != n {
		return 0, fmt.Errorf("ranges cover 0…%d of 0…%d", at, n)
	}
	return len(ranges), nil
}

// shape2 is a shape of rank 1 or 2 as rows × columns (a vector is one row).
func shape2(shape []int) (rows, cols int) {
	if len(shape) == 1 {
		return 1, shape[0]
	}
	return shape[0], shape[1]
}

// box2 is a piece's box as [row0, rows, col0, cols].
func box2(p Piece) [4]int {
	if len(p.Offsets) == 1 {
		return [4]int{0, 1, p.Offsets[0], p.Extents[0]}
	}
	return [4]int{p.Offsets[0], p.Extents[0], p.Offsets[1], p.Extents[1]}
}

// pieceTensor is a tensor ready to read through its pieces: the boxes as a
// grid, each box's pieces sorted by their flat ranges.
type pieceTensor struct {
	name       string
	shape      []int
	dtype      DType // of the first piece (Set.Tensor reports it)
	rows, cols int
	rowStarts  []int // the grid's row ranges' starts, sorted
	colStarts  []int
	cells      [][]*piece // by row range × column range, each sorted by flat start
	size       int64      // bytes stored
	// grid, instead of the cells, locates pieces by arithmetic (a
	// PieceGrid), in files, the piece files.
	grid  *PieceGrid
	files []*lazyFile
}

type piece struct {
	file         *lazyFile
	offset       int64
	dtype        DType
	row0, rows   int
	col0, cols   int
	flat0, flat1 int64
}

// newPieceTensor indexes a checked tensor's pieces; files gives the
// opened (or lazily opened) file of a piece's file name, and table is
// the piece files a PieceGrid indexes.
func newPieceTensor(name string, t ShardedTensor, files func(string) *lazyFile, table []*lazyFile) *pieceTensor {
	pt := &pieceTensor{name: name, shape: slices.Clone(t.Shape)}
	pt.rows, pt.cols = shape2(t.Shape)
	if t.Grid != nil {
		pt.grid, pt.files = t.Grid, table
		pt.dtype, _ = parseHeaderDType(t.Grid.DType)
		pt.size = int64(pt.rows) * int64(pt.cols) * int64(pt.dtype.Size())
		return pt
	}
	rs, cs := map[int]bool{}, map[int]bool{}
	var ps []*piece
	for _, p := range t.Pieces {
		b := box2(p)
		dt, _ := parseHeaderDType(p.DType)
		ps = append(ps, &piece{file: files(p.File), offset: p.Offset, dtype: dt, row0: b[0], rows: b[1], col0: b[2], cols: b[3], flat0: p.Flat[0], flat1: p.Flat[1]})
		rs[b[0]], cs[b[2]] = true, true
		pt.size += p.Elements() * int64(dt.Size())
	}
	pt.dtype = ps[0].dtype
	pt.rowStarts, pt.colStarts = slices.Sorted(maps.Keys(rs)), slices.Sorted(maps.Keys(cs))
	pt.cells = make([][]*piece, len(pt.rowStarts)*len(pt.colStarts))
	for _, p := range ps {
		i, _ := slices.BinarySearch(pt.rowStarts, p.row0)
		j, _ := slices.BinarySearch(pt.colStarts, p.col0)
		c := &pt.cells[i*len(pt.colStarts)+j]
		*c = append(*c, p)
	}
	for _, c := range pt.cells {
		slices.SortFunc(c, func(a, b *piece) int { return cmp.Compare(a.flat0, b.flat0) })
	}
	return pt
}

// onePiece is a tensor of a plain safetensors file as a tensor of one
// piece, so that one read path serves both.
func onePiece(f *File, t *TensorInfo) *pieceTensor {
	rows, cols, _ := matrixDims(t.Shape)
	lf := &lazyFile{path: f.path, f: f}
	lf.once.Do(func() {})
	p := &piece{file: lf, offset: t.Offset, dtype: t.DType, rows: rows, cols: cols, flat0: 0, flat1: int64(rows) * int64(cols)}
	return &pieceTensor{name: t.Name, shape: t.Shape, dtype: t.DType, rows: rows, cols: cols, rowStarts: []int{0}, colStarts: []int{0}, cells: [][]*piece{{p}}, size: t.Size}
}

// readBlock reads the elements flat0 ≤ k < flat1, counted row-major, of
// the block of rows r0:r1 and columns c0:c1, converting them to float32
// into dst (flat1−flat0 long). It reads exactly those elements' bytes from
// the pieces that hold them.
func (pt *pieceTensor) readBlock(dst []float32, r0, r1, c0, c1 int, flat0, flat1 int64) error {
	if r0 < 0 || r0 >= r1 || r1 > pt.rows || c0 < 0 || c0 >= c1 || c1 > pt.cols || flat0 < 0 || flat0 > flat1 || flat1 > int64(r1-r0)*int64(c1-c0) {
		if flat0 == flat1 && flat0 >= 0 {
			return nil
		}
		return fmt.Errorf("block [%d:%d, %d:%d] elements %d…%d out of range for shape %v", r0, r1, c0, c1, flat0, flat1, pt.shape)
	}
	if int64(len(dst)) != flat1-flat0 {
		return fmt.Errorf("destination holds %d values, the block part has %d", len(dst), flat1-flat0)
	}
	w := int64(c1 - c0)
	var scratch []byte
	for f := flat0; f < flat1; {
		r, c := int(f/w), int(f%w)
		n := min(w-int64(c), flat1-f)
		// The run: row r0+r, columns c0+c … c0+c+n, into dst[f-flat0:].
		if err := pt.readRun(dst[f-flat0:f-flat0+n], r0+r, c0+c, &scratch); err != nil {
			return located{err}
		}
		f += n
	}
	return nil
}

// located marks an error that names its piece file and tensor already (a
// read's), which the set does not wrap again with its folder.
type located struct{ error }

func (l located) Unwrap() error { return l.error }

// gridPiece is the piece of a PieceGrid tensor that holds element (r, c)
// of the tensor, with its file opened and its offset from the header.
func (pt *pieceTensor) gridPiece(r, c int) (*piece, error) {
	g := pt.grid
	br, bc := pt.rows/g.Parts[0], pt.cols/g.Parts[1]
	i, j := r/br, c/bc
	vol := int64(br) * int64(bc)
	per := (vol + int64(g.Parts[2]) - 1) / int64(g.Parts[2])
	k := int((int64(r-i*br)*int64(bc) + int64(c-j*bc)) / per)
	f0, f1 := g.chunk(vol, k)
	lf := pt.files[g.file(i, j, k)]
	f, err := lf.open()
	if err != nil {
		return nil, err
	}
	t, ok := f.Tensor(pt.name)
	if want := (f1 - f0) * int64(pt.dtype.Size()); !ok || t.DType != pt.dtype || t.Size != want {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q: not the piece the checkpoint's map records (%d bytes of %s)", f.path, pt.name, want, pt.dtype)
	}
	return &piece{file: lf, offset: t.Offset, dtype: pt.dtype, row0: i * br, rows: br, col0: j * bc, cols: bc, flat0: f0, flat1: f1}, nil
}

// readRun reads len(dst) elements of row r from column c on.
func (pt *pieceTensor) readRun(dst []float32, r, c int, scratch *[]byte) error {
	if pt.grid != nil {
		for len(dst) > 0 {
			p, err := pt.gridPiece(r, c)
			if err != nil {
				return err
			}
			start := int64(r-p.row0)*int64(p.cols) + int64(c-p.col0)
			// Within the box's row and the chunk.
			n := min(int64(len(dst)), int64(p.col0+p.cols-c), p.flat1-start)
			f, _ := p.file.open()
			t := TensorInfo{Name: pt.name, DType: p.dtype}
			if err := f.readScratch(&t, dst[:n], p.offset+(start-p.flat0)*int64(p.dtype.Size()), scratch); err != nil {
				return err
			}
			dst, c = dst[n:], c+int(n)
		}
		return nil
	}
	i := sort.SearchInts(pt.rowStarts, r+1) - 1
	for len(dst) > 0 {
		j := sort.SearchInts(pt.colStarts, c+1) - 1
		cell := pt.cells[i*len(pt.colStarts)+j]
		b := cell[0]
		n := min(len(dst), b.col0+b.cols-c)
		// Box-flat positions of the columns c … c+n of row r.
		start := int64(r-b.row0)*int64(b.cols) + int64(c-b.col0)
		end := start + int64(n)
		k := sort.Search(len(cell), func(k int) bool { return cell[k].flat1 > start })
		for at := start; at < end; k++ {
			p := cell[k]
			m := min(end, p.flat1) - at
			f, err := p.file.open()
			if err != nil {
				return err
			}
			es := int64(p.dtype.Size())
			t := TensorInfo{Name: pt.name, DType: p.dtype}
			if err := f.readScratch(&t, dst[at-start:at-start+m], p.offset+(at-p.flat0)*es, scratch); err != nil {
				return err
			}
			at += m
		}
		dst, c = dst[n:], c+n
	}
	return nil
}

// lazyFile is a piece file opened on first read, so that a rank opens and
// maps only the files that hold its parts.
type lazyFile struct {
	path  string
	check func(*File) error // run once when opened: do the pieces match its header
	once  sync.Once
	mu    sync.Mutex // guards f for opened
	f     *File
	err   error
}

func (l *lazyFile) open() (*File, error) {
	l.once.Do(func() {
		f, err := OpenFile(l.path)
		if err == nil && l.check != nil {
			if err = l.check(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			f = nil
		}
		l.mu.Lock()
		l.f, l.err = f, err
		l.mu.Unlock()
	})
	return l.f, l.err
}

// opened is the file if a read opened it, else nil; it opens nothing.
func (l *lazyFile) opened() *File {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f
}

// OpenPieces opens the tensors of a sharded checkpoint in folder dir that
// m maps (checked with Check first) and whose names keep accepts (nil:
// all) as a Set: reads go to the pieces, each file opened when first
// read. A piece file's header must hold a tensor of the piece's name at
// the piece's offset, dtype and length, or reads from it fail.
func OpenPieces(dir string, m PieceMap, pieceFiles []string, keep func(name string) bool) (*Set, error) {
	if err := m.Check(pieceFiles); err != nil {
		return nil, fmt.Errorf("checkpoints: %s: %w", dir, err)
	}
	s := &Set{dir: dir, owner: map[string]*File{}, pieces: map[string]*pieceTensor{}}
	files := map[string]*lazyFile{}
	type want struct {
		name   string
		offset int64
		dtype  DType
		bytes  int64
	}
	wants := map[string][]want{}
	var table []*lazyFile // the piece files, for tensors laid out by a PieceGrid
	get := func(name string) *lazyFile {
		if files[name] == nil {
			lf := &lazyFile{path: filepath.Join(dir, name)}
			lf.check = func(f *File) error {
				for _, w := range wants[name] {
					t, ok := f.Tensor(w.name)
					if !ok || t.Offset != w.offset || t.DType != w.dtype || t.Size != w.bytes {
						return fmt.Errorf("checkpoints: %s: tensor %q: not the piece the checkpoint's map records (at byte %d, %d bytes of %s)", f.path, w.name, w.offset, w.bytes, w.dtype)
					}
				}
				return nil
			}
			files[name] = lf
		}
		return files[name]
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if keep != nil && !keep(name) {
			continue
		}
		t := m[name]
		for _, p := range t.Pieces {
			dt, _ := parseHeaderDType(p.DType)
			wants[p.File] = append(wants[p.File], want{name, p.Offset, dt, p.Elements() * int64(dt.Size())})
		}
		if t.Grid != nil && table == nil {
			table = make([]*lazyFile, len(pieceFiles))
			for i, f := range pieceFiles {
				table[i] = get(f)
			}
		}
		pt := newPieceTensor(name, t, get, table)
		s.pieces[name] = pt
		s.tensors = append(s.tensors, TensorInfo{Name: name, DType: pt.dtype, Shape: slices.Clone(t.Shape), Offset: -1, Size: pt.size})
	}
	if len(s.tensors) == 0 {
		return nil, fmt.Errorf("checkpoints: %s: no tensors to open", dir)
	}
	// The set's files are those its tensors' pieces are in (a grid's:
	// the indices it reaches, once per distinct grid). Files are not even
	// looked at until read: a rank of a large grid touches only the few
	// that hold its parts.
	used := map[*lazyFile]bool{}
	grids := map[string]bool{}
	for _, pt := range s.pieces {
		if pt.grid == nil {
			for _, c := range pt.cells {
				for _, p := range c {
					used[p.file] = true
				}
			}
			continue
		}
		key := fmt.Sprint(pt.rows, pt.cols, *pt.grid)
		if grids[key] {
			continue
		}
		grids[key] = true
		g := pt.grid
		vol := int64(pt.rows/g.Parts[0]) * int64(pt.cols/g.Parts[1])
		for i := range g.Parts[0] {
			for j := range g.Parts[1] {
				for k := range g.Parts[2] {
					if f0, f1 := g.chunk(vol, k); f0 < f1 {
						used[pt.files[g.file(i, j, k)]] = true
					}
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if used[files[name]] {
			s.lazy = append(s.lazy, files[name])
		}
	}
	return s, nil
}

// matrixDims views a tensor of one or two dimensions as rows × columns (a
// vector is one row); ok is false for any other rank, which is then 1 × 1.
func matrixDims(shape []int) (rows, cols int, ok bool) {
	switch len(shape) {
	case 1:
		return 1, shape[0], true
	case 2:
		return shape[0], shape[1], true
	}
	return 1, 1, false
}
