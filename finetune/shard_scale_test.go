package finetune

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/engine/perfmodel"
)

// specParams are a configuration's parameters as a model would hold them
// on one rank, without their tensors: what the checkpoint layout needs.
func specParams(cfg *checkpoints.Config) []*engine.Param {
	var ps []*engine.Param
	for _, s := range cfg.TensorSpecs() {
		ps = append(ps, &engine.Param{Name: s.Name, Full: s.Shape, Split: s.Split, Shard: engine.WholeShard(engine.RowsCols(s.Shape))})
	}
	return ps
}

// touchedFiles lists the piece files (indices into the piece files) that
// the elements of shard s of the tensor t hold: the reader's arithmetic
// (checkpoints.PieceGrid), walked run by run.
func touchedFiles(t checkpoints.ShardedTensor, s engine.Shard, into map[int]bool) {
	g := t.Grid
	rows, cols := engine.RowsCols(t.Shape)
	br, bc := rows/g.Parts[0], cols/g.Parts[1]
	vol := int64(br) * int64(bc)
	per := (vol + int64(g.Parts[2]) - 1) / int64(g.Parts[2])
	w := s.Col1 - s.Col0
	for f := s.Flat0; f < s.Flat1; {
		r, c := s.Row0+f/w, s.Col0+f%w
		end := s.Col0 + min(w, f%w+(s.Flat1-f))
		for c < end {
			i, j := r/br, c/bc
			at := int64(r-i*br)*int64(bc) + int64(c-j*bc)
			k := int(at / per)
			into[g.Base+i*g.Strides[0]+j*g.Strides[1]+k*g.Strides[2]] = true
			next := min(end, (j+1)*bc, c+int(int64(k+1)*per-at))
			f += next - c
			c = next
		}
	}
}

// TestShardedReadPlanAt405B: a Llama 3.1 405B checkpoint, as the fastest
// grid `plan` finds for 8192 H100s saves it (8192 positions, 16384 piece
// files), made of sparse files (headers, and holes for the data): for
// ranks of that grid and of another of plan's grids, loading reads
// exactly the rank's bytes of the weights, from only the files that hold
// them (the others are never created), in bounded time and memory; the
// manifest stays small.
func TestShardedReadPlanAt405B(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a few hundred MB of holes")
	}
	preset, err := checkpoints.LookupPreset("llama3.1-405b")
	if err != nil {
		t.Fatal(err)
	}
	cfg := preset.Config()
	plans, err := perfmodel.Search(perfmodel.Job{Config: cfg, Device: mustDevice(t, "h100"), GPUs: 8192, SeqLen: 8192, GlobalBatchTokens: 8192 * 8192}, perfmodel.Options{TopK: 20})
	if err != nil {
		t.Fatal(err)
	}
	grid := func(p perfmodel.Plan) comm.Grid {
		return comm.Grid{Data: p.Grid.Data, X: p.Grid.X, Y: p.Grid.Y, Z: p.Grid.Z}
	}
	// The reader is the ranked grid that splits X or Y otherwise than the
	// writer with the most tensor-parallel ranks (the smallest shards, so
	// that the test reads hundreds of MB, not GB, of holes).
	writer := grid(plans[0])
	reader := writer
	for _, p := range plans[1:] {
		g := grid(p)
		if (g.Y != writer.Y || g.X != writer.X) && (reader == writer || g.X*g.Y*g.Z > reader.X*reader.Y*reader.Z) {
			reader = g
		}
	}
	if reader == writer {
		t.Fatalf("no plan of %d splits X or Y otherwise than %v", len(plans), writer)
	}
	t.Logf("written on %v (plan's #1), read on %v and %v", writer, writer, reader)
	params := specParams(cfg)
	tensors, files := pieceMap(writer, params, true)
	man, err := encodeManifest(Manifest{Step: 1, Grid: gridOf(writer), PieceFiles: files, Tensors: tensors,
		Files: map[string]checkpoints.FileSum{"x": {}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("manifest: %d bytes for %d tensors in %d piece files", len(man), len(tensors), len(files))
	if len(man) > 4<<20 {
		t.Errorf("the manifest is %d bytes", len(man))
	}
	dir := t.TempDir()
	created := map[int]bool{}
	// makeFile writes writer position pos's weight file as its header and
	// a hole.
	makeFile := func(pos int) {
		if created[pos] {
			return
		}
		created[pos] = true
		d, x, y, z := writer.Coords(pos)
		if d != 0 {
			t.Fatalf("position %d is no writer", pos)
		}
		ps := positionPieces(writer, x, y, z, params)
		specs := streamSpecs(ps)
		layout := checkpoints.Layout(specs, checkpoints.DTypeF32, nil)
		end := int64(0)
		for _, l := range layout {
			end = max(end, l.Offset+l.Size)
		}
		path := filepath.Join(dir, files[pos])
		if err := os.WriteFile(path, checkpoints.Header(specs, checkpoints.DTypeF32, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, end); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		shape comm.Grid
		ranks []int
	}{
		{writer, []int{0, writer.Size()/2 + 3, writer.Size() - 1}},
		{reader, []int{1, reader.Size() - 1}},
	} {
		for _, rank := range c.ranks {
			_, x, y, z := c.shape.Coords(rank)
			touched := map[int]bool{}
			var want int64
			for _, p := range params {
				s := parallel.ShardAt(c.shape, x, y, z, p.Split, p.Full)
				touchedFiles(tensors[p.Name], s, touched)
				want += 4 * int64(s.Elements())
			}
			for f := range touched {
				makeFile(f)
			}
			set, err := checkpoints.OpenPieces(dir, tensors, files, checkpoints.IsWeightName)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			allocs := readMetric("/gc/heap/allocs:bytes")
			start := time.Now()
			for _, p := range params {
				s := parallel.ShardAt(c.shape, x, y, z, p.Split, p.Full)
				if _, err := parallel.ReadShard(set, p.Name, p.Full, s); err != nil {
					t.Fatalf("%v rank %d: %v", c.shape, rank, err)
				}
			}
			took, allocated := time.Since(start), readMetric("/gc/heap/allocs:bytes")-allocs
			got := set.BytesRead()
			set.Close()
			t.Logf("%v rank %d: read %d bytes (its shards: %d) from %d files in %v, allocating %.1f MiB", c.shape, rank, got, want, len(touched), took, float64(allocated)/(1<<20))
			if got != want {
				t.Errorf("%v rank %d: read %d bytes, its shards are %d", c.shape, rank, got, want)
			}
			if took > 60*time.Second {
				t.Errorf("%v rank %d: the read took %v", c.shape, rank, took)
			}
			if int64(allocated) > want+16<<20 {
				t.Errorf("%v rank %d: allocated %d bytes for %d of shards", c.shape, rank, allocated, want)
			}
		}
	}
	if len(created) > 16 {
		t.Errorf("%d files made", len(created))
	}
}

func mustDevice(t *testing.T, name string) perfmodel.Device {
	t.Helper()
	for _, d := range perfmodel.Devices() {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no device %q", name)
	return perfmodel.Device{}
}
