package finetune

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
)

// A training checkpoint is sharded as the grid that saves it holds the
// weights: each position (x, y, z) of the grid writes the pieces it holds
// of every weight to its own file, and those of the two AdamW moments to
// another; the data-parallel replicas of a position, which hold the same
// pieces, write nothing (the replica of data coordinate 0 writes), and a
// copy several positions hold — a norm weight, whole on every Y and Z
// rank — is written by one of them (y = z = 0; positionPieces). A
// grid of one position (one rank, or data parallelism alone) writes the
// two files of a one-file checkpoint, model.safetensors and
// optimizer.safetensors, whose tensors are then whole. The manifest maps
// every full tensor to its pieces (checkpoints.PieceMap).

// momentPrefixes name the AdamW moments' tensors: the prefix and the HF
// name of the weight.
var momentPrefixes = [2]string{"exp_avg/", "exp_avg_sq/"}

// momentsMetadata is the metadata of the moments' files.
var momentsMetadata = map[string]string{"optimizer": "adamw"}

// shardFiles are the names of the weight and moment files of the grid
// position pos of n (pos = the world rank of (data 0, x, y, z)).
func shardFiles(pos, n int) (weights, moments string) {
	if n == 1 {
		return checkpoints.SafetensorsFile, OptimizerFile
	}
	return fmt.Sprintf("model.rank-%05d-of-%05d.safetensors", pos, n), fmt.Sprintf("optimizer.rank-%05d-of-%05d.safetensors", pos, n)
}

// shardPiece is one piece a grid position stores: a weight, or a moment,
// of parameter param.
type shardPiece struct {
	name  string // the full tensor's name
	param int    // index into the parameters
	kind  int    // 0: the weight; 1, 2: its first and second moment
	shard engine.Shard
	shape []int // as stored: parallel.LocalShape
}

// positionPieces lists the weight pieces the position (x, y, z) of a grid
// writes: of each parameter the copy that position holds, unless another
// position writes the same copy (parallel.CountsAt, by the parameter's
// split: a norm weight off y = z = 0, an adapter off x = y = z = 0).
func positionPieces(shape comm.Grid, x, y, z int, params []*engine.Param) []shardPiece {
	var out []shardPiece
	at := parallel.Coord{X: x, Y: y, Z: z}
	for i, p := range params {
		if !parallel.CountsAt(at, p.Split) {
			continue
		}
		s := parallel.ShardAt(shape, x, y, z, p.Split, p.Full)
		local := parallel.LocalShape(p.Full, s)
		if shape.X*shape.Y*shape.Z == 1 {
			local = p.Full
		}
		out = append(out, shardPiece{name: p.Name, param: i, shard: s, shape: local})
	}
	return out
}

// momentPieces are the pieces of the two moments of the weights' pieces.
func momentPieces(weights []shardPiece) []shardPiece {
	var out []shardPiece
	for k, prefix := range momentPrefixes {
		for _, p := range weights {
			p.name, p.kind = prefix+p.name, k+1
			out = append(out, p)
		}
	}
	return out
}

func streamSpecs(ps []shardPiece) []checkpoints.StreamTensor {
	specs := make([]checkpoints.StreamTensor, len(ps))
	for i, p := range ps {
		specs[i] = checkpoints.StreamTensor{Name: p.name, Shape: p.shape}
	}
	return specs
}

// gridShape is the grid a model runs on (one rank: 1×1×1×1).
//
// It is the grid the checkpoint is saved on: the model's, except that a
// LoRA run's, whose trained tensors (the adapters) are whole on every
// rank, saves as one position with every rank a replica of it (savedAt).
func gridShape(m *llama.Model) comm.Grid {
	g := m.Grid()
	if m.Adapter() != nil {
		return comm.Grid{Data: g.World.Size(), X: 1, Y: 1, Z: 1}
	}
	return g.Shape()
}

// savedAt is this rank's coordinate on gridShape(m).
func savedAt(m *llama.Model) parallel.Coord {
	g := m.Grid()
	if m.Adapter() != nil {
		return parallel.Coord{Data: g.Rank()}
	}
	return g.At
}

// pieceMap is the manifest's map of every tensor's pieces, for a
// checkpoint saved on shape, and its piece files (the weights' files by
// grid position, then the moments'): each tensor's layout is a
// checkpoints.PieceGrid, a few numbers whatever the grid's size, which
// the engine's sharding (parallel.ShardAt) of its declared split implies:
// its rows and columns over the axes the split names (a matrix's rows
// over Y and columns over X, a transposed one's the reverse, a vector's
// columns over X or Y), a matrix block's elements over Z, and whole
// along every other axis, written by the positions at coordinate 0 of
// those (positionPieces).
func pieceMap(shape comm.Grid, params []*engine.Param, moments bool) (checkpoints.PieceMap, []string) {
	out := checkpoints.PieceMap{}
	n := shape.X * shape.Y * shape.Z
	var files []string
	for _, kind := range []int{0, 1} {
		for pos := range n {
			w, m := shardFiles(pos, n)
			files = append(files, [2]string{w, m}[kind])
		}
	}
	if !moments {
		files = files[:n]
	}
	f32 := checkpoints.DTypeF32.String()
	for _, p := range params {
		g := checkpoints.PieceGrid{Parts: [3]int{1, 1, 1}, DType: f32}
		rows, cols := p.Split.Axes()
		// A position's file is x + X·y + X·Y·z (shardFiles' order).
		for i, a := range []checkpoints.Axis{rows, cols} {
			switch a {
			case checkpoints.AxisX:
				g.Parts[i], g.Strides[i] = shape.X, 1
			case checkpoints.AxisY:
				g.Parts[i], g.Strides[i] = shape.Y, shape.X
			}
		}
		if p.Split.ChunksZ() {
			g.Parts[2], g.Strides[2] = shape.Z, shape.X*shape.Y
		}
		out[p.Name] = checkpoints.ShardedTensor{Shape: append([]int(nil), p.Full...), Grid: &g}
		if moments {
			mg := g
			mg.Base = n
			for _, prefix := range momentPrefixes {
				grid := mg
				out[prefix+p.Name] = checkpoints.ShardedTensor{Shape: append([]int(nil), p.Full...), Grid: &grid}
			}
		}
	}
	return out, files
}

// saveBuffer bounds the host buffer through which a rank streams its
// tensors to its files: at most this many values at a time.
const saveBuffer = 1 << 20

// A pieceSource hands the values of one of this rank's pieces to put,
// in order, in parts.
type pieceSource func(p shardPiece, put func([]float32) error) error

// deviceSource streams pieces from the backend through one host buffer
// (of at most saveBuffer values, reused).
func deviceSource(m *llama.Model, o *Optimizer) pieceSource {
	b := m.Backend()
	var buf []float32
	return func(p shardPiece, put func([]float32) error) error {
		t, done := pieceTensor(m, o, p)
		defer done()
		if buf == nil {
			buf = make([]float32, min(largestPiece(m), saveBuffer))
		}
		for off := 0; off < t.Len(); off += len(buf) {
			n := min(len(buf), t.Len()-off)
			b.Download(buf[:n], t.View(off, n))
			if err := put(buf[:n]); err != nil {
				return err
			}
		}
		return nil
	}
}

// pieceTensor is the backend tensor a piece is of, to be released by
// done once read: a float32 master joined from a split one's halves
// (llama.Model.Master) is a temporary.
func pieceTensor(m *llama.Model, o *Optimizer, p shardPiece) (t *engine.Tensor, done func()) {
	if p.kind == 0 {
		return m.Master(m.Trainable()[p.param])
	}
	return o.moment(p.param, p.kind)
}

// rankPieces are this rank's pieces to write: its weights', and its
// moments' (none on a data-parallel replica).
func rankPieces(m *llama.Model, o *Optimizer) (weights, moments []shardPiece) {
	shape, at := gridShape(m), savedAt(m)
	if at.Data != 0 {
		return nil, nil
	}
	weights = positionPieces(shape, at.X, at.Y, at.Z, m.Trainable())
	if mv, _ := o.Moments(); mv != nil {
		moments = momentPieces(weights)
	}
	return weights, moments
}

// largestPiece is the element count of this rank's largest piece.
func largestPiece(m *llama.Model) int {
	n := 0
	for _, p := range m.Trainable() {
		n = max(n, p.Shard.Elements())
	}
	return n
}

// writeShards writes this rank's files of a checkpoint into the folder
// tmp, each piece's values from src, and returns their FileSums by file
// name (none on a data-parallel replica).
func writeShards(tmp string, m *llama.Model, o *Optimizer, src pieceSource) (map[string]checkpoints.FileSum, error) {
	sums := map[string]checkpoints.FileSum{}
	if mv, _ := o.Moments(); mv != nil && len(mv) != len(m.Trainable()) {
		return nil, fmt.Errorf("finetune: the optimizer holds %d parameters' moments, the model %d parameters", len(mv), len(m.Trainable()))
	}
	ws, ms := rankPieces(m, o)
	if ws == nil {
		return sums, nil
	}
	shape, at := gridShape(m), savedAt(m)
	wfile, mfile := shardFiles(shape.Rank(0, at.X, at.Y, at.Z), shape.X*shape.Y*shape.Z)
	write := func(file string, ps []shardPiece, meta map[string]string) error {
		sum, err := checkpoints.WriteStream(filepath.Join(tmp, file), streamSpecs(ps), checkpoints.DTypeF32, meta,
			func(i int, put func([]float32) error) error { return src(ps[i], put) })
		if err != nil {
			return err
		}
		sums[file] = sum
		return nil
	}
	if err := write(wfile, ws, nil); err != nil {
		return nil, err
	}
	if ms != nil {
		if err := write(mfile, ms, momentsMetadata); err != nil {
			return nil, err
		}
	}
	return sums, nil
}

// A snapshot is a host copy of this rank's pieces (weights and moments),
// taken at a step for an asynchronous save: one buffer a piece, allocated
// once and reused by every later save of the run.
type snapshot struct {
	bufs map[[2]int][]float32 // by (kind, param)
}

// snapshotBytes is what a snapshot of this rank's pieces holds.
func snapshotBytes(m *llama.Model, o *Optimizer) int64 {
	ws, ms := rankPieces(m, o)
	var n int64
	for _, p := range append(ws, ms...) {
		n += 4 * int64(p.shard.Elements())
	}
	return n
}

// take copies this rank's pieces from the backend into the snapshot.
// Under ZeRO it is collective over the data group: the masters are made
// whole and the moments gathered to the writing rank (gatherSaved).
func (s *snapshot) take(m *llama.Model, o *Optimizer) error {
	ws, ms := rankPieces(m, o)
	if s.bufs == nil {
		s.bufs = map[[2]int][]float32{}
	}
	if o.zero != nil {
		if err := o.syncMasters(); err != nil {
			return err
		}
		if err := o.gatherSaved(m, s.bufs); err != nil {
			return err
		}
		ms = nil // gathered
	}
	for _, p := range append(ws, ms...) {
		t, done := pieceTensor(m, o, p)
		key := [2]int{p.kind, p.param}
		if len(s.bufs[key]) != t.Len() {
			s.bufs[key] = make([]float32, t.Len())
		}
		m.Backend().Download(s.bufs[key], t)
		done()
	}
	return nil
}

// source reads pieces from the snapshot.
func (s *snapshot) source() pieceSource {
	return func(p shardPiece, put func([]float32) error) error {
		return put(s.bufs[[2]int{p.kind, p.param}])
	}
}

// sumBytes is the size of one file's FileSum as ranks send it: its size
// and SHA-256.
const sumBytes = 8 + sha256.Size

// rankFiles are the files the rank at world rank r of the model's grid
// writes, in order (none for a data-parallel replica).
func rankFiles(m *llama.Model, o *Optimizer, r int) []string {
	shape := gridShape(m)
	d, x, y, z := shape.Coords(r)
	if d != 0 {
		return nil
	}
	w, mo := shardFiles(shape.Rank(0, x, y, z), shape.X*shape.Y*shape.Z)
	if mv, _ := o.Moments(); mv != nil {
		return []string{w, mo}
	}
	return []string{w}
}

// encodeSums encodes this rank's FileSums in the order of its files.
func encodeSums(sums map[string]checkpoints.FileSum, m *llama.Model, o *Optimizer) ([]byte, error) {
	var out []byte
	for _, f := range rankFiles(m, o, m.Grid().Rank()) {
		s, ok := sums[f]
		sha, err := hex.DecodeString(s.SHA256)
		if !ok || err != nil || len(sha) != sha256.Size {
			return nil, fmt.Errorf("finetune: no checksum of %s", f)
		}
		out = binary.LittleEndian.AppendUint64(out, uint64(s.Size))
		out = append(out, sha...)
	}
	return out, nil
}

// decodeSums adds the FileSums of every other rank, all[r] from rank r,
// to sums.
func decodeSums(all [][]byte, m *llama.Model, o *Optimizer, sums map[string]checkpoints.FileSum) error {
	for r := 1; r < len(all); r++ {
		files := rankFiles(m, o, r)
		if len(all[r]) != len(files)*sumBytes {
			return fmt.Errorf("finetune: rank %d sent %d bytes of checksums for %d files", r, len(all[r]), len(files))
		}
		for i, f := range files {
			b := all[r][i*sumBytes : (i+1)*sumBytes]
			sums[f] = checkpoints.FileSum{Size: int64(binary.LittleEndian.Uint64(b)), SHA256: hex.EncodeToString(b[8:])}
		}
	}
	return nil
}
