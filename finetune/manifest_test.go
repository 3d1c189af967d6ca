package finetune

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
)

// saveSteps saves checkpoints of steps 1..n of a tiny model in dir
// (keeping all) and returns dir.
func saveSteps(t *testing.T, n int) string {
	t.Helper()
	b := cpu.New(cpu.Options{Threads: 1})
	m := tinyModel(t, b, 1)
	o, err := NewOptimizer(b, m.Params(), OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "checkpoints")
	for s := 1; s <= n; s++ {
		st := TrainerState{Step: s, OptimizerStep: s, LoaderPosition: int64(10 * s)}
		if err := SaveCheckpoint(dir, StepName(s), m, o, st, SaveOptions{Files: map[string][]byte{"tokenizer.json": []byte("{}")}}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Ways to damage a checkpoint: each names the file it breaks and what
// the verification must say.
var damages = []struct {
	name, file, want string
	damage           func(path string) error
}{
	{"bit flip", checkpoints.SafetensorsFile, "corrupt", func(p string) error { return flipBit(p, 1000) }},
	{"bit flip in the optimizer", OptimizerFile, "corrupt", func(p string) error { return flipBit(p, 5000) }},
	{"truncated", OptimizerFile, "truncated", func(p string) error { return os.Truncate(p, 100) }},
	{"missing file", StateFile, "missing", os.Remove},
	{"missing manifest", ManifestFile, "missing", os.Remove},
	{"damaged manifest", ManifestFile, "unreadable", func(p string) error {
		return os.WriteFile(p, []byte(`{"version":1,"step":3,"files":{"model.safetensors":{"size":1,"sha256":"xyz"}}}`), 0o644)
	}},
}

func flipBit(path string, at int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		return err
	}
	b[0] ^= 0x10
	_, err = f.WriteAt(b, at)
	return err
}

func TestVerifyCheckpoint(t *testing.T) {
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			dir := saveSteps(t, 1)
			path := filepath.Join(dir, StepName(1))
			m, err := VerifyCheckpoint(path)
			if err != nil {
				t.Fatalf("a fresh checkpoint fails verification: %v", err)
			}
			// Every file but the manifest is recorded.
			entries, _ := os.ReadDir(path)
			if len(m.Files) != len(entries)-1 || m.Step != 1 {
				t.Errorf("manifest of step %d records %d files, the folder holds %d", m.Step, len(m.Files), len(entries))
			}
			if err := tc.damage(filepath.Join(path, tc.file)); err != nil {
				t.Fatal(err)
			}
			_, err = VerifyCheckpoint(path)
			var ce *CheckpointError
			if !errors.As(err, &ce) || ce.File != tc.file || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "finetune: "+path+": "+tc.file+": ") {
				t.Errorf("after %s of %s: %v", tc.name, tc.file, err)
			}
		})
	}
}

// TestResumeFallsBack: a damaged latest checkpoint is passed over for the
// newest intact one, with a warning naming the bad file; with every
// checkpoint damaged, the error names each one.
func TestResumeFallsBack(t *testing.T) {
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			dir := saveSteps(t, 3)
			if err := tc.damage(filepath.Join(dir, StepName(3), tc.file)); err != nil {
				t.Fatal(err)
			}
			path, warnings, err := LatestVerified(dir)
			if err != nil || path != filepath.Join(dir, StepName(2)) {
				t.Fatalf("LatestVerified = %q, %v; want step 2", path, err)
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0], StepName(3)+": "+tc.file+": ") || !strings.Contains(warnings[0], "resuming from "+StepName(2)) || strings.Contains(warnings[0], "\n") {
				t.Errorf("warnings %q", warnings)
			}
			for s := 1; s <= 2; s++ {
				if err := tc.damage(filepath.Join(dir, StepName(s), tc.file)); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err = LatestVerified(dir)
			if err == nil || !strings.Contains(err.Error(), "no intact checkpoint") {
				t.Fatalf("every checkpoint damaged: %v", err)
			}
			for s := 1; s <= 3; s++ {
				if !strings.Contains(err.Error(), StepName(s)+": "+tc.file+": ") {
					t.Errorf("the error does not name %s's %s: %v", StepName(s), tc.file, err)
				}
			}
		})
	}
}

// TestResumeCandidates: only checkpoints up to latest's are tried (a newer
// one is left by a run resumed from an older checkpoint), and an
// unreadable latest falls back to every checkpoint by step.
func TestResumeCandidates(t *testing.T) {
	dir := saveSteps(t, 3)
	os.WriteFile(filepath.Join(dir, LatestFile), []byte(StepName(2)+"\n"), 0o644)
	if path, warnings, err := LatestVerified(dir); err != nil || path != filepath.Join(dir, StepName(2)) || len(warnings) != 0 {
		t.Errorf("latest → step 2: got %q %q %v", path, warnings, err)
	}
	os.WriteFile(filepath.Join(dir, LatestFile), []byte("../x\n"), 0o644)
	if path, warnings, err := LatestVerified(dir); err != nil || path != filepath.Join(dir, StepName(3)) || len(warnings) != 1 || !strings.Contains(warnings[0], "not a checkpoint name") {
		t.Errorf("unreadable latest: got %q %q %v", path, warnings, err)
	}
	if _, _, err := LatestVerified(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Errorf("no folder: %v", err)
	}
}

// TestLegacyCheckpointResumes: a checkpoint saved before manifests
// (trainer_state.json version 1) resumes unverified, with a warning.
func TestLegacyCheckpointResumes(t *testing.T) {
	dir := saveSteps(t, 1)
	path := filepath.Join(dir, StepName(1))
	os.Remove(filepath.Join(path, ManifestFile))
	b, _ := os.ReadFile(filepath.Join(path, StateFile))
	os.WriteFile(filepath.Join(path, StateFile), []byte(strings.Replace(string(b), `"version": 2`, `"version": 1`, 1)), 0o644)
	got, warnings, err := LatestVerified(dir)
	if err != nil || got != path || len(warnings) != 1 || !strings.Contains(warnings[0], "unverified") {
		t.Errorf("legacy checkpoint: %q %q %v", got, warnings, err)
	}
}

// TestCheckpointFolderMode: a checkpoint folder is 0755, like every other
// output, not MkdirTemp's 0700.
func TestCheckpointFolderMode(t *testing.T) {
	dir := saveSteps(t, 1)
	fi, err := os.Stat(filepath.Join(dir, StepName(1)))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("checkpoint folder mode %v, want drwxr-xr-x", fi.Mode())
	}
}

// TestOpenResumesFromIntact: Open's resume passes over a damaged latest
// checkpoint; on a grid rank 0 alone verifies and warns, and every rank
// loads the checkpoint it chose.
func TestOpenResumesFromIntact(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data, cfg.Out = model, dataset, filepath.Join(t.TempDir(), "run")
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps, cfg.SaveEvery, cfg.Keep = 4, 4, 3, 1, 0
	trainRun(t, cfg, nil, "", 0)
	if err := flipBit(filepath.Join(cfg.Out, "checkpoints", StepName(3), checkpoints.SafetensorsFile), 2000); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	err := launch.Local(comm.Grid{Data: 2, X: 2, Y: 1, Z: 1}, parallel.Overlap{}, func(g *parallel.Grid) error {
		r, err := OpenParallel(cfg, cpu.New(cpu.Options{Threads: 1}), g, cfg.Out)
		if err != nil {
			return err
		}
		defer r.Close()
		mu.Lock()
		defer mu.Unlock()
		if r.Step != 2 {
			t.Errorf("rank %d resumed at step %d, want 2", g.Rank(), r.Step)
		}
		want := 0
		if g.Rank() == 0 {
			want = 1
		}
		if len(r.Warnings) != want || want == 1 && !strings.Contains(r.Warnings[0], StepName(3)+": "+checkpoints.SafetensorsFile+": SHA-256") {
			t.Errorf("rank %d warnings %q", g.Rank(), r.Warnings)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPruneKeepsAVerifiedCheckpoint: pruning never removes the newest
// checkpoint that verifies, also with keep 1 right after a damaged save.
func TestPruneKeepsAVerifiedCheckpoint(t *testing.T) {
	b := cpu.New(cpu.Options{Threads: 1})
	m := tinyModel(t, b, 1)
	o, err := NewOptimizer(b, m.Params(), OptimizerConfig{Name: "sgd"})
	if err != nil {
		t.Fatal(err)
	}
	damage := func(tmp string) {
		if err := flipBit(filepath.Join(tmp, checkpoints.SafetensorsFile), 3000); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		keep    int
		damaged []bool // per step, from 1
		want    []int  // the steps left after the last save
		resume  int    // the step LatestVerified picks
	}{
		{"keep 1, last save damaged", 1, []bool{false, false, true}, []int{2, 3}, 2},
		{"keep 1, then a good save", 1, []bool{false, true, false}, []int{3}, 3},
		{"keep 2, both kept damaged", 2, []bool{false, false, true, true}, []int{2, 3, 4}, 2},
		{"keep 2, intact", 2, []bool{false, false, false, false}, []int{3, 4}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "checkpoints")
			for i, bad := range tc.damaged {
				opt := SaveOptions{Keep: tc.keep}
				if bad {
					opt.BeforeCommit = damage
				}
				if err := SaveCheckpoint(dir, StepName(i+1), m, o, TrainerState{Step: i + 1}, opt); err != nil {
					t.Fatal(err)
				}
			}
			var left []int
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				var s int
				if _, err := fmt.Sscanf(e.Name(), "step-%d", &s); err == nil {
					left = append(left, s)
				}
			}
			if !slices.Equal(left, tc.want) {
				t.Errorf("steps left %v, want %v", left, tc.want)
			}
			if path, _, err := LatestVerified(dir); err != nil || path != filepath.Join(dir, StepName(tc.resume)) {
				t.Errorf("resumes from %q (%v), want step %d", path, err, tc.resume)
			}
		})
	}
}

// TestOpenResumesNamedCheckpoint: a checkpoint named for resume must
// verify (there is nothing to fall back to); the error names its bad file.
func TestOpenResumesNamedCheckpoint(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data, cfg.Out = model, dataset, filepath.Join(t.TempDir(), "run")
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps, cfg.SaveEvery, cfg.Keep = 4, 4, 2, 1, 0
	trainRun(t, cfg, nil, "", 0)
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			ck := filepath.Join(t.TempDir(), "ck")
			if err := os.CopyFS(ck, os.DirFS(filepath.Join(cfg.Out, "checkpoints", StepName(2)))); err != nil {
				t.Fatal(err)
			}
			r, err := Open(cfg, cpu.New(cpu.Options{Threads: 1}), ck)
			if err != nil {
				t.Fatalf("an intact checkpoint: %v", err)
			}
			r.Close()
			if err := tc.damage(filepath.Join(ck, tc.file)); err != nil {
				t.Fatal(err)
			}
			_, err = Open(cfg, cpu.New(cpu.Options{Threads: 1}), ck)
			if want := "finetune: " + ck + ": " + tc.file + ": "; err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q…%s", tc.name, err, want, tc.want)
			}
		})
	}
}
