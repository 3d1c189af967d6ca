package checkpoints

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
// empty folder.
func Export(src, out string, opt ExportOptions) error {
	if opt.DType != DTypeF32 && opt.DType != DTypeBF16 {
		return fmt.Errorf("checkpoints: %s: cannot export weights as %s (want F32 or BF16)", out, opt.DType)
	}
	if opt.MaxShardBytes < 0 {
		return fmt.Errorf("checkpoints: %s: shard size %d bytes", out, opt.MaxShardBytes)
	}
	ck, err := Open(src)
	if err != nil {
		return err
	}
	defer ck.Close()
	files, err := ReadTokenizerFiles(src)
	if err != nil {
		return err
	}
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		return fmt.Errorf("checkpoints: %s exists and is not empty: export into a new folder", out)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoints: %w", err)
	}
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-"+filepath.Base(out)+"-")
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	specs := ck.Config.TensorSpecs()
	tensors := make([]StreamTensor, len(specs))
	for i, s := range specs {
		tensors[i] = StreamTensor{Name: s.Name, Shape: s.Shape}
	}
	n := 0
	fill := func(i int, put func([]float32) error) error {
		if err := streamTensor(ck.Weights, tensors[i], put); err != nil {
			return err
		}
		if n++; opt.Progress != nil {
			opt.Progress(n, len(tensors))
		}
		return nil
	}
	if _, err := WriteSetStream(tmp, tensors, WriteOptions{DType: opt.DType, MaxShardBytes: opt.MaxShardBytes}, fill); err != nil {
		return err
	}
	if err := SaveMeta(tmp, ck.Config, SaveOptions{DType: opt.DType, Files: files}); err != nil {
		return err
	}
	if err := os.Remove(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoints: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	done = true
	return atomicfile.SyncDir(parent)
}

// streamTensor hands the named tensor of s to put a block of whole rows
// (at most exportChunk values, or one row) at a time.
func streamTensor(s *Set, t StreamTensor, put func([]float32) error) error {
	rows, cols := 1, 1
	switch len(t.Shape) {
	case 1:
		cols = t.Shape[0]
	case 2:
		rows, cols = t.Shape[0], t.Shape[1]
	default:
		return fmt.Errorf("checkpoints: tensor %q: shape %v", t.Name, t.Shape)
	}
	step := max(1, exportChunk/max(1, cols))
	for r := 0; r < rows; r += step {
		r1 := min(rows, r+step)
		v, err := s.ReadBlock(t.Name, r, r1, 0, cols, 0, (r1-r)*cols)
		if err != nil {
			return err
		}
		if err := put(v); err != nil {
			return err
		}
	}
	return nil
}
