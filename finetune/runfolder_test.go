package finetune

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine/cpu"
)

// trainFolder runs TrainRank on one rank and returns its result and the
// run's warnings.
func trainFolder(cfg Config, h Hooks) (Result, []string, error) {
	var warnings []string
	h.Started = func(r *Run) { warnings = r.Warnings }
	res, err := TrainRank(cfg, cpu.New(cpu.Options{Threads: 1}), nil, h)
	return res, warnings, err
}

// metricsSteps reads the steps of a run folder's metrics lines.
func metricsSteps(t *testing.T, dir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m struct{ Step int }
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("%s: %q: %v", MetricsFile, l, err)
		}
		steps = append(steps, m.Step)
	}
	return steps
}

// folderFiles reads every regular file under dir, by relative path.
func folderFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = string(b)
		return nil
	})
	return files
}

// TestResumeStaysInItsFolder (issue 32, item 1): a copied run resumed
// from its copy writes to the copy, whatever out its config.yaml
// recorded, and from another working folder; the original is untouched.
func TestResumeStaysInItsFolder(t *testing.T) {
	cfg := shortRun(t)
	root := t.TempDir()
	orig := filepath.Join(root, "orig")
	cfg.Out = orig
	if _, _, err := trainFolder(cfg, Hooks{StopAfter: 2}); err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(root, "copy")
	if err := os.CopyFS(copyDir, os.DirFS(orig)); err != nil {
		t.Fatal(err)
	}
	before := folderFiles(t, orig)
	t.Chdir(t.TempDir()) // the stored paths must not depend on the working folder
	rc, err := ReadConfig("", copyDir)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Out != copyDir {
		t.Fatalf("ReadConfig of the copy: out %q, want %q", rc.Out, copyDir)
	}
	res, _, err := trainFolder(rc, Hooks{Resume: copyDir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Step != 4 {
		t.Fatalf("resumed copy: step %d, want 4", res.Step)
	}
	if got := metricsSteps(t, copyDir); len(got) != 4 || got[3] != 4 {
		t.Errorf("the copy's metrics: steps %v, want 1–4", got)
	}
	after := folderFiles(t, orig)
	for name, b := range before {
		if name == LockFile {
			continue
		}
		if after[name] != b {
			t.Errorf("resuming the copy changed the original's %s", name)
		}
	}
	if len(after) != len(before) {
		t.Errorf("resuming the copy changed the original's files: %d, were %d", len(after), len(before))
	}
}

// TestResumeWithoutLatest (item 2): a run whose checkpoints/latest is
// missing resumes from its newest intact checkpoint, with a warning, and
// keeps its checkpoints.
func TestResumeWithoutLatest(t *testing.T) {
	cfg := shortRun(t)
	cfg.Out = filepath.Join(t.TempDir(), "run")
	cfg.Keep = 0
	if _, _, err := trainFolder(cfg, Hooks{StopAfter: 4}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cfg.Out, CheckpointsDir, LatestFile)); err != nil {
		t.Fatal(err)
	}
	// And a latest holding garbage, which sorts before the step folders.
	garbled := filepath.Join(t.TempDir(), "garbled")
	if err := os.CopyFS(garbled, os.DirFS(cfg.Out)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(garbled, CheckpointsDir, LatestFile), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := cfg
	g.Out, g.MaxSteps = garbled, 6
	if res, _, err := trainFolder(g, Hooks{Resume: garbled}); err != nil || res.Step != 6 {
		t.Errorf("a run whose latest holds garbage: step %d, %v", res.Step, err)
	}
	cfg.MaxSteps = 6
	res, warnings, err := trainFolder(cfg, Hooks{Resume: cfg.Out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Step != 6 {
		t.Errorf("resumed to step %d, want 6", res.Step)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), "trying the checkpoints by step") {
		t.Errorf("no warning of the missing latest: %q", warnings)
	}
	for _, s := range []int{2, 4} {
		if _, err := os.Stat(filepath.Join(cfg.Out, CheckpointsDir, StepName(s))); err != nil {
			t.Errorf("checkpoint of step %d: %v", s, err)
		}
	}
	if got := metricsSteps(t, cfg.Out); len(got) != 6 || got[0] != 1 {
		t.Errorf("metrics steps %v, want 1–6 (started over?)", got)
	}
}

// TestNewRunSparesForeignFiles (item 3): a new run in a folder that holds
// the names a run writes, not written by a run, is refused — with and
// without Replace — and nothing of the user's changes.
func TestNewRunSparesForeignFiles(t *testing.T) {
	cfg := shortRun(t)
	for _, c := range []struct {
		name  string
		setup func(dir string) error
	}{
		{"final/report.pdf", func(dir string) error {
			os.MkdirAll(filepath.Join(dir, FinalDir), 0o755)
			return os.WriteFile(filepath.Join(dir, FinalDir, "report.pdf"), []byte("the user's"), 0o644)
		}},
		{"a file named final", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, FinalDir), []byte("the user's"), 0o644)
		}},
		{"checkpoints/step-00000002/notes", func(dir string) error {
			os.MkdirAll(filepath.Join(dir, CheckpointsDir, StepName(2)), 0o755)
			return os.WriteFile(filepath.Join(dir, CheckpointsDir, StepName(2), "notes"), []byte("the user's"), 0o644)
		}},
		{"checkpoints/.tmp-x", func(dir string) error {
			os.MkdirAll(filepath.Join(dir, CheckpointsDir, ".tmp-x"), 0o755)
			return os.WriteFile(filepath.Join(dir, CheckpointsDir, ".tmp-x", "f"), []byte("the user's"), 0o644)
		}},
	} {
		for _, replace := range []bool{false, true} {
			dir := filepath.Join(t.TempDir(), "out")
			os.MkdirAll(dir, 0o755)
			if err := c.setup(dir); err != nil {
				t.Fatal(err)
			}
			before := folderFiles(t, dir)
			cfg.Out = dir
			_, _, err := trainFolder(cfg, Hooks{Replace: replace})
			var fe *ForeignFilesError
			if !errors.As(err, &fe) {
				t.Errorf("%s (replace %v): %v, want a ForeignFilesError", c.name, replace, err)
			}
			after := folderFiles(t, dir)
			delete(after, LockFile)
			if len(after) != len(before) {
				t.Errorf("%s (replace %v): files %v, were %v", c.name, replace, after, before)
			}
			for name, b := range before {
				if after[name] != b {
					t.Errorf("%s (replace %v): %s changed", c.name, replace, name)
				}
			}
		}
	}
	// A folder of other files is fine, and keeps them.
	dir := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644)
	cfg.Out = dir
	if _, _, err := trainFolder(cfg, Hooks{StopAfter: 2}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "mine" {
		t.Errorf("notes.txt: %q, %v", b, err)
	}
	// Replacing that run removes the run's files, not the user's.
	if _, _, err := trainFolder(cfg, Hooks{Replace: true, StopAfter: 2}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "mine" {
		t.Errorf("after replace, notes.txt: %q, %v", b, err)
	}
}

// TestLockRefusesLinks (item 4): a .lock that is a symbolic link is not
// followed: its target keeps its bytes and the lock is refused.
func TestLockRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("do not truncate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, LockFile)); err != nil {
		t.Skip("no symbolic links:", err)
	}
	_, err := Lock(dir)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Lock over a link: %v, want a refusal naming the link", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "do not truncate" {
		t.Errorf("the link's target now holds %q", b)
	}
	// metrics.jsonl likewise.
	cfg := shortRun(t)
	cfg.Out = filepath.Join(t.TempDir(), "run")
	os.MkdirAll(cfg.Out, 0o755)
	if err := os.Symlink(target, filepath.Join(cfg.Out, MetricsFile)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(cfg.Out, RunMarkerFile), nil, 0o644)
	if _, _, err := trainFolder(cfg, Hooks{Replace: true, StopAfter: 1}); err != nil {
		t.Logf("run over a linked metrics file: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "do not truncate" {
		t.Errorf("a linked metrics.jsonl's target now holds %q", b)
	}
}

// TestRecoverMetrics (item 5): a garbled line drops that line only, kept
// aside, with a warning; a torn last line and missing steps are warned
// about; the lines of later steps are dropped, saying so.
func TestRecoverMetrics(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, MetricsFile)
	lines := []string{`{"step":1,"loss":3}`, `{"step":2,"loss":2.9}`, `garbage}{`, `{"step":3,"loss":2.8}`,
		`{"step":5,"loss":2.6}`, `{"step":6,"loss":2.5}`, `{"step":7,"lo`}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	warnings, err := recoverMetrics(path, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := metricsSteps(t, dir), []int{1, 2, 3, 5}; !equalInts(got, want) {
		t.Errorf("kept steps %v, want %v", got, want)
	}
	all := strings.Join(warnings, "\n")
	for _, want := range []string{"line 3 (garbled)", "line 7 (torn)", DroppedMetricsFile, "no metrics line for step 4", "dropped the metrics of step 6"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings %q lack %q", all, want)
		}
	}
	dropped, err := os.ReadFile(filepath.Join(dir, DroppedMetricsFile))
	if err != nil || string(dropped) != "garbage}{\n{\"step\":6,\"loss\":2.5}\n{\"step\":7,\"lo\n" {
		t.Errorf("%s: %q, %v", DroppedMetricsFile, dropped, err)
	}
	// A clean file is left as it is, without warnings.
	warnings, err = recoverMetrics(path, 5)
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "step 4") {
		t.Errorf("second recovery: %q, %v (want only the gap)", warnings, err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestResumeIdentityByContent (item 8): a byte-identical dataset at a new
// path resumes; a dataset rebuilt in place with another sequence length,
// or a base re-initialised in place, is refused naming the setting and
// its two values; max_steps may grow; a changed clip is recorded in the
// history and warned about.
func TestResumeIdentityByContent(t *testing.T) {
	cfg := shortRun(t)
	cfg.Out = filepath.Join(t.TempDir(), "run")
	if _, _, err := trainFolder(cfg, Hooks{StopAfter: 2}); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(moved, os.DirFS(cfg.Data)); err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.Data = moved
	other.MaxSteps = 6
	other.Clip = 0.5
	res, warnings, err := trainFolder(other, Hooks{Resume: cfg.Out, StopAfter: 4})
	if err != nil {
		t.Fatalf("a byte-identical dataset at a new path: %v", err)
	}
	if res.Step != 4 || res.Steps != 6 {
		t.Errorf("extended run: step %d of %d, want 4 of 6", res.Step, res.Steps)
	}
	all := strings.Join(warnings, "\n")
	if !strings.Contains(all, "clip 1 → 0.5") || !strings.Contains(all, HistoryFile) {
		t.Errorf("warnings %q do not name the changed clip", all)
	}
	hist, err := os.ReadFile(filepath.Join(cfg.Out, HistoryFile))
	if err != nil || bytes.Count(hist, []byte("\n")) != 2 || !bytes.Contains(hist, []byte(`"key":"clip","was":"1","now":"0.5"`)) {
		t.Errorf("%s: %s, %v", HistoryFile, hist, err)
	}

	// The base re-initialised in place.
	base, err := checkpoints.Open(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	mc := base.Config
	base.Close()
	if err := checkpoints.Save(cfg.Model, mc, checkpoints.RandomWeights(mc, 99), checkpoints.SaveOptions{DType: checkpoints.DTypeF32}); err != nil {
		t.Fatal(err)
	}
	_, _, err = trainFolder(other, Hooks{Resume: cfg.Out})
	var ie *IdentityError
	if !errors.As(err, &ie) || len(ie.Diffs) != 1 || ie.Diffs[0].Key != "model" || ie.Diffs[0].Saved == ie.Diffs[0].Now {
		t.Fatalf("resume on a re-initialised base: %v, want an IdentityError naming model", err)
	}
	if !strings.Contains(err.Error(), "model: sample-sha256:") {
		t.Errorf("the refusal does not show the two digests: %v", err)
	}
}

// TestResumeBeforeFirstCheckpointKeepsFiles (item 10): resuming a run
// that has no checkpoint starts over without removing config.yaml or the
// metrics first: a kill right after the start leaves config.yaml, and the
// metrics lines of the redone steps are dropped saying so.
func TestResumeBeforeFirstCheckpointKeepsFiles(t *testing.T) {
	cfg := shortRun(t)
	cfg.Out = filepath.Join(t.TempDir(), "run")
	cfg.SaveEvery = 0
	os.MkdirAll(cfg.Out, 0o755)
	conf := "model: " + cfg.Model + "\ndata: " + cfg.Data + "\n"
	os.WriteFile(filepath.Join(cfg.Out, ConfigFile), []byte(conf), 0o644)
	os.WriteFile(filepath.Join(cfg.Out, MetricsFile), []byte(`{"step":1,"loss":3}`+"\n"), 0o644)
	var seen map[string]string
	h := Hooks{Resume: cfg.Out, StopAfter: 1}
	h.Stop = func() bool {
		if seen == nil {
			seen = folderFiles(t, cfg.Out)
		}
		return true
	}
	_, warnings, err := trainFolder(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(seen[ConfigFile], "model: "+cfg.Model) {
		t.Errorf("during the restarted run, config.yaml holds %q", seen[ConfigFile])
	}
	all := strings.Join(warnings, "\n")
	if !strings.Contains(all, "starting over from step 1") || !strings.Contains(all, "dropped the metrics of step 1") {
		t.Errorf("warnings %q: want the restart and the dropped line", all)
	}
}

// TestModelFromRunIsVerified (item 6): a run's checkpoint reached as a
// model (its folder, its latest file or the checkpoint itself) is
// verified: a flipped bit is refused, naming the file, and for the run
// folder the newest intact checkpoint.
func TestModelFromRunIsVerified(t *testing.T) {
	cfg := shortRun(t)
	cfg.Out = filepath.Join(t.TempDir(), "run")
	if _, _, err := trainFolder(cfg, Hooks{}); err != nil {
		t.Fatal(err)
	}
	latest := filepath.Join(cfg.Out, CheckpointsDir, StepName(4))
	if dir, _, err := ResolveModel(cfg.Out); err != nil || dir != latest {
		t.Fatalf("intact run: %q, %v", dir, err)
	}
	if err := flipBit(filepath.Join(latest, "model.safetensors"), 4096); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{cfg.Out, filepath.Join(cfg.Out, CheckpointsDir, LatestFile), latest} {
		_, _, err := ResolveModel(path)
		if err == nil || !strings.Contains(err.Error(), "model.safetensors: SHA-256 differs") {
			t.Errorf("ResolveModel(%s) of a damaged checkpoint: %v", path, err)
		}
	}
	_, _, err := ResolveModel(cfg.Out)
	if want := "the newest intact one is " + filepath.Join(cfg.Out, CheckpointsDir, StepName(2)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("ResolveModel(run): %v, want it to name %s", err, want)
	}
}

// TestEpochsOverflow (issue 32, item 9): epochs × steps an epoch beyond
// units.MaxCount is refused, not wrapped into a count of one epoch.
func TestEpochsOverflow(t *testing.T) {
	cfg := shortRun(t)
	cfg.MaxSteps, cfg.Epochs, cfg.Out = 0, 1_000_000_000, t.TempDir()
	_, err := Open(cfg, cpu.New(cpu.Options{Threads: 1}), "")
	if err == nil || !strings.Contains(err.Error(), "epochs 1000000000 × ") {
		t.Errorf("Open with 10⁹ epochs: %v", err)
	}
}

// TestEvalEveryWithoutHoldout (issue 33, item 5): eval_every on a dataset
// without a holdout split says that no held-out loss will be measured,
// rather than being ignored in silence.
func TestEvalEveryWithoutHoldout(t *testing.T) {
	cfg := shortRun(t)
	dir := t.TempDir()
	ds := filepath.Join(dir, "train-only")
	w, err := data.CreateStore(ds, data.TokenizerInfo{SHA256: "none", VocabSize: sweepConfig().VocabSize, BOS: -1, EOS: -1},
		data.Settings{Mode: data.ModeDocument, SeqLen: sweepT})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if _, err := w.Add(data.Document{Source: "d", Line: int64(i + 1), IDs: []int32{1, 2, 3, 4, 5}, Split: data.Train}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(nil, nil); err != nil {
		t.Fatal(err)
	}
	cfg.Data, cfg.Out = ds, filepath.Join(dir, "run")
	r, err := Open(cfg, cpu.New(cpu.Options{Threads: 1}), "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if all := strings.Join(r.Warnings, "\n"); !strings.Contains(all, "eval_every 2: "+ds+" has no holdout split") {
		t.Errorf("warnings %q", all)
	}
}

// TestResolveMissingModel (issue 33, item 4): a model path that does not
// exist says so and what a model path may be, not "stat …".
func TestResolveMissingModel(t *testing.T) {
	_, _, err := ResolveModel("nosuch")
	if err == nil || err.Error() != "model nosuch: no such file or folder (want a checkpoint folder, a run folder or its checkpoints/latest file)" {
		t.Errorf("ResolveModel(nosuch): %v", err)
	}
}
