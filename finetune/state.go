package finetune

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/atomicfile"
)

// Files of a training checkpoint, beside the HF checkpoint files.
const (
	OptimizerFile = "optimizer.safetensors" // AdamW moments, full shape, HF names prefixed exp_avg/ and exp_avg_sq/
	StateFile     = "trainer_state.json"
	LatestFile    = "latest" // in the checkpoints folder: the name of the newest complete checkpoint
)

// TrainerState is what a run needs, besides weights and moments, to resume
// exactly where it stopped.
type TrainerState struct {
	Version        int     `json:"version"`
	Step           int     `json:"step"`            // optimizer steps done
	OptimizerStep  int     `json:"optimizer_step"`  // AdamW's bias-correction counter
	LoaderPosition int64   `json:"loader_position"` // global samples consumed
	TokensSeen     int64   `json:"tokens_seen"`
	LastLoss       float64 `json:"last_loss"`
	ConfigHash     string  `json:"config_hash"` // of the settings that must not change on resume
}

const stateVersion = 1

// SaveOptions control SaveCheckpoint.
type SaveOptions struct {
	Files map[string][]byte // extra files for the checkpoint (the tokenizer's)
	DType checkpoints.DType // storage type of the weights
	Keep  int               // checkpoints kept; 0 keeps all
	// BeforeCommit, if set, runs when every file of the checkpoint is
	// written and before the directory is committed: crash-safety tests
	// kill the process there.
	BeforeCommit func(tmpDir string)
}

// SaveCheckpoint writes a complete training checkpoint as one directory,
// committed as a whole: everything is written under a temporary name in
// dir, synced, and renamed to name; then dir/latest is replaced atomically
// to point at it, and all but the newest opt.Keep checkpoints are removed.
// A crash at any point leaves latest pointing at a complete checkpoint.
//
// Weights and optimizer moments are saved full-shape, so that a run can
// resume on another grid. On a grid SaveCheckpoint is collective: every
// rank gathers the shards, rank 0 writes, and every rank returns its
// error if it failed.
func SaveCheckpoint(dir, name string, m *llama.Model, o *Optimizer, st TrainerState, opt SaveOptions) error {
	weights, err := m.GatherWeights()
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	var moments []checkpoints.Tensor
	if mv, vv := o.Moments(); mv != nil {
		for i, p := range o.params {
			for _, part := range []struct {
				prefix string
				t      *engine.Tensor
			}{{"exp_avg/", mv[i]}, {"exp_avg_sq/", vv[i]}} {
				data, err := m.Gather(p, part.t)
				if err != nil {
					return fmt.Errorf("finetune: %w", err)
				}
				moments = append(moments, checkpoints.Tensor{Name: part.prefix + p.Name, Shape: append([]int(nil), p.Full...), Data: data})
			}
		}
	}
	g := m.Grid()
	if g != nil && g.Rank() != 0 {
		return g.Agree(m.Backend(), nil)
	}
	err = writeCheckpoint(dir, name, m.Config, weights, moments, st, opt)
	if g != nil {
		return g.Agree(m.Backend(), err)
	}
	return err
}

// writeCheckpoint is SaveCheckpoint's writing, of full-shape tensors.
func writeCheckpoint(dir, name string, cfg *checkpoints.Config, weights, moments []checkpoints.Tensor, st TrainerState, opt SaveOptions) error {
	files, dtype, keep := opt.Files, opt.DType, opt.Keep
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".tmp-"+name+"-")
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			os.RemoveAll(tmp)
		}
	}()
	if err := checkpoints.Save(tmp, cfg, weights, checkpoints.SaveOptions{DType: dtype, Files: files}); err != nil {
		return err
	}
	if moments != nil {
		if err := checkpoints.WriteFile(filepath.Join(tmp, OptimizerFile), moments, checkpoints.DTypeF32, map[string]string{"optimizer": "adamw"}); err != nil {
			return err
		}
	}
	st.Version = stateVersion
	sb, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, StateFile), append(sb, '\n')); err != nil {
		return err
	}
	if opt.BeforeCommit != nil {
		opt.BeforeCommit(tmp)
	}
	final := filepath.Join(dir, name)
	if err := os.RemoveAll(final); err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	committed = true
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, LatestFile), []byte(name+"\n")); err != nil {
		return err
	}
	return prune(dir, keep)
}

// LatestCheckpoint returns the path of the newest complete checkpoint in
// dir, following its latest pointer.
func LatestCheckpoint(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, LatestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("finetune: %s: no checkpoint (no %s file)", dir, LatestFile)
	}
	if err != nil {
		return "", fmt.Errorf("finetune: %w", err)
	}
	name := strings.TrimSpace(string(b))
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("finetune: %s: %s holds %q, not a checkpoint name", dir, LatestFile, name)
	}
	return filepath.Join(dir, name), nil
}

// LoadCheckpoint restores weights, optimizer moments and the trainer state
// from a checkpoint written by SaveCheckpoint into m and o. On a grid each
// rank reads only its shards, whatever grid saved the checkpoint.
func LoadCheckpoint(path string, m *llama.Model, o *Optimizer) (TrainerState, error) {
	var st TrainerState
	b, err := os.ReadFile(filepath.Join(path, StateFile))
	if err != nil {
		return st, fmt.Errorf("finetune: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("finetune: %s: %v", filepath.Join(path, StateFile), err)
	}
	if st.Version != stateVersion {
		return st, fmt.Errorf("finetune: %s: state version %d (want %d)", filepath.Join(path, StateFile), st.Version, stateVersion)
	}
	ck, err := checkpoints.Open(path)
	if err != nil {
		return st, err
	}
	defer ck.Close()
	if !sameShapes(ck.Config, m.Config) {
		return st, fmt.Errorf("finetune: %s: the checkpoint's tensors do not fit the run's model", path)
	}
	if err := m.LoadWeights(ck.Weights); err != nil {
		return st, fmt.Errorf("finetune: %s: %w", path, err)
	}
	if mv, vv := o.Moments(); mv != nil {
		f, err := checkpoints.OpenFile(filepath.Join(path, OptimizerFile))
		if err != nil {
			return st, err
		}
		defer f.Close()
		for i, p := range o.params {
			for _, part := range []struct {
				prefix string
				t      *engine.Tensor
			}{{"exp_avg/", mv[i]}, {"exp_avg_sq/", vv[i]}} {
				if err := m.ReadInto(f, part.prefix+p.Name, p, part.t); err != nil {
					return st, fmt.Errorf("finetune: %s: %w", f.Path(), err)
				}
			}
		}
	}
	o.Step = st.OptimizerStep
	return st, nil
}

// sameShapes reports whether two configurations have the same tensors,
// by name and shape: what a checkpoint's weights must fit.
func sameShapes(a, b *checkpoints.Config) bool {
	sa, sb := a.TensorSpecs(), b.TensorSpecs()
	if len(sa) != len(sb) {
		return false
	}
	for i := range sa {
		if sa[i].Name != sb[i].Name || !slices.Equal(sa[i].Shape, sb[i].Shape) {
			return false
		}
	}
	return true
}

// prune removes all but the newest keep checkpoints (by name, which sorts
// by step) and any temporary directories left by an interrupted save.
func prune(dir string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	latest, _ := LatestCheckpoint(dir)
	var steps []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			os.RemoveAll(filepath.Join(dir, e.Name()))
			continue
		}
		if strings.HasPrefix(e.Name(), "step-") {
			steps = append(steps, e.Name())
		}
	}
	if keep <= 0 || len(steps) <= keep {
		return nil
	}
	sort.Strings(steps)
	for _, s := range steps[:len(steps)-keep] {
		if filepath.Join(dir, s) == latest {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, s)); err != nil {
			return fmt.Errorf("finetune: %w", err)
		}
	}
	return nil
}

// StepName is the directory name of the checkpoint after step s; it sorts
// by step.
func StepName(s int) string { return fmt.Sprintf("step-%08d", s) }
