package checkpoints

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/memtrain/memtrain/internal/atomicfile"
)

// ExportOptions control Export.
type ExportOptions struct {
	DType DType // of the exported weights: F32 or BF16
	// MaxShardBytes splits the weights into model-0000i-of-0000N files of
	// at most this many bytes (a larger tensor gets a file of its own), as
	// HF transformers does; 0 writes one model.safetensors.
	MaxShardBytes int64
	// Progress, if set, is called after each tensor with the tensors done
	// and their number.
	Progress func(done, total int)
	// Adapter, if not nil, is a LoRA adapter of the source checkpoint to
	// merge into the weights it adapts (merge.go): W + s·B·A, in float64
	// from the stored W, rounded once.
	Adapter *Adapter
}

// ExportDType reads an export's dtype: f32, bf16, or auto, the dtype of
// the checkpoint in folder dir when that is bf16, else f32 (an f16 one
// included: the export writes F32 or BF16).
func ExportDType(dir, name string) (DType, error) {
	switch strings.ToLower(name) {
	case "f32":
		return DTypeF32, nil
	case "bf16":
		return DTypeBF16, nil
	case "auto":
		cfg, err := ReadConfig(dir)
		if err != nil {
			return 0, err
		}
		if d, err := ParseDType(cfg.TorchDType); err == nil && d == DTypeBF16 {
			return d, nil
		}
		return DTypeF32, nil
	}
	return 0, fmt.Errorf("checkpoints: export as %q: want f32, bf16 or auto", name)
}

// exportChunk bounds the values Export holds at a time: a tensor larger
// than this is read and written a block of whole rows at a time.
const exportChunk = 1 << 22

// Export writes the checkpoint in folder src, an HF checkpoint or a
// sharded training checkpoint saved on any grid, as an HF checkpoint
// folder out: config.json, the tokenizer files, and the weights by HF
// name in model.safetensors or model-0000i-of-0000N.safetensors with
// model.safetensors.index.json. It streams: each tensor is read (from
// whichever pieces hold it) and written a bounded block at a time, so
// that it never holds more than one tensor, nor more than exportChunk
// values of one. The folder is written under a temporary name beside out
// and renamed into place once complete; out must not exist, or be an
// empty folder. (An ExportPlan splits the same work between processes.)
func Export(src, out string, opt ExportOptions) error {
	plan, err := PlanExport(src, opt)
	if err != nil {
		return err
	}
	defer plan.Close()
	tmp, err := ExportTemp(out)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	for i := range plan.Files() {
		if err := plan.WriteFile(tmp, i); err != nil {
			return err
		}
	}
	if err := plan.Finish(tmp, out); err != nil {
		return err
	}
	done = true
	return nil
}

// An ExportPlan is an export (see Export) planned from the tensors'
// shapes alone: its weight files, each of which WriteFile writes
// independently — several processes can write different ones into one
// temporary folder — and Finish, which adds the index, the tokenizer
// files and config.json and puts the folder in place.
type ExportPlan struct {
	setPlan
	src   *Source
	files map[string][]byte
	opt   ExportOptions
	done  int // tensors written, for Progress
}

// PlanExport opens the checkpoint in folder src and plans its export.
func PlanExport(src string, opt ExportOptions) (*ExportPlan, error) {
	if opt.DType != DTypeF32 && opt.DType != DTypeBF16 {
		return nil, fmt.Errorf("checkpoints: %s: cannot export weights as %s (want F32 or BF16)", src, opt.DType)
	}
	if opt.MaxShardBytes < 0 {
		return nil, fmt.Errorf("checkpoints: %s: shard size %d bytes", src, opt.MaxShardBytes)
	}
	files, err := ReadTokenizerFiles(src)
	if err != nil {
		return nil, err
	}
	s, err := OpenSource(src, opt.Adapter, opt.DType)
	if err != nil {
		return nil, err
	}
	var tensors []StreamTensor
	for _, t := range s.Config.TensorSpecs() {
		tensors = append(tensors, StreamTensor{Name: t.Name, Shape: t.Shape})
	}
	return &ExportPlan{setPlan: newSetPlan(tensors, opt.DType, opt.MaxShardBytes), src: s, files: files, opt: opt}, nil
}

// Close releases the source checkpoint.
func (p *ExportPlan) Close() error { return p.src.Close() }

// Files is the number of weight files.
func (p *ExportPlan) Files() int { return len(p.shards) }

// WriteFile writes weight file i into the folder dir.
func (p *ExportPlan) WriteFile(dir string, i int) error {
	shard := p.shards[i]
	specs := make([]StreamTensor, len(shard))
	for j, k := range shard {
		specs[j] = p.tensors[k]
	}
	_, err := writeStream(filepath.Join(dir, p.fileName(i)), specs, p.opt.DType, nil, false, func(j int, put func([]float32) error) error {
		if err := p.streamTensor(specs[j], put); err != nil {
			return err
		}
		if p.done++; p.opt.Progress != nil {
			p.opt.Progress(p.done, len(p.tensors))
		}
		return nil
	})
	return err
}

// Finish completes the export whose weight files are all written in the
// temporary folder tmp (ExportTemp's): it writes the index (of several
// files), the tokenizer files and config.json, and renames tmp to out.
func (p *ExportPlan) Finish(tmp, out string) error {
	if len(p.shards) > 1 {
		if err := atomicfile.WriteFile(filepath.Join(tmp, SafetensorsIndexFile), p.index()); err != nil {
			return err
		}
	}
	if err := SaveMeta(tmp, p.src.Config, SaveOptions{DType: p.opt.DType, Files: p.files}); err != nil {
		return err
	}
	return CommitFolder(tmp, out)
}

// CommitFolder puts the complete folder tmp (ExportTemp's) in place as
// out, which must be absent or empty, and syncs out's parent.
func CommitFolder(tmp, out string) error {
	if err := os.Remove(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoints: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	return atomicfile.SyncDir(filepath.Dir(filepath.Clean(out)))
}

// ExportTemp makes the temporary folder of an export to out, beside it;
// out must not exist, or be an empty folder.
func ExportTemp(out string) (string, error) {
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		// About the caller's own path: no package prefix, as os's
		// errors name a path.
		return "", fmt.Errorf("%s exists and is not empty: export into a new folder", out)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("checkpoints: %w", err)
	}
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("checkpoints: %w", err)
	}
	tmp, err := atomicfile.TempDir(parent, ".tmp-"+filepath.Base(out)+"-")
	if err != nil {
		return "", fmt.Errorf("checkpoints: %w", err)
	}
	return tmp, nil
}

// streamTensor hands the named tensor of the source to put a block of
// whole rows (at most exportChunk values, or one row) at a time, merged
// with its adapter when it has one.
func (p *ExportPlan) streamTensor(t StreamTensor, put func([]float32) error) error {
	rows, cols, ok := matrixDims(t.Shape)
	if !ok {
		return fmt.Errorf("checkpoints: tensor %q: shape %v", t.Name, t.Shape)
	}
	step := max(1, exportChunk/max(1, cols))
	for r := 0; r < rows; r += step {
		v, err := p.src.ReadRows(t.Name, r, min(rows, r+step))
		if err != nil {
			return err
		}
		if err := put(v); err != nil {
			return err
		}
	}
	return nil
}
