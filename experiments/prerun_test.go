package experiments

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/launch"
)

// TestManySeedsPreRunCheck: the checks before any work take a time per
// arm and per distinct base model, not per run: 4,000 seeds of a study on
// a checkpoint base are checked (and the data prepared) in seconds, where
// each run read the base's tokenizer and config again (800 runs took 33 s
// here, 4,000 seeds two minutes on the prober's machine, 100,000 seeds
// 14); progress names the check; and Stop is polled inside it, so that a
// signal during it ends the study there, before any data is written.
func TestManySeedsPreRunCheck(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	cfg, files := tinyBaseConfig(t)
	ck := filepath.Join(t.TempDir(), "base")
	if err := checkpoints.Save(ck, cfg, checkpoints.RandomWeights(cfg, 1), checkpoints.SaveOptions{Files: files}); err != nil {
		t.Fatal(err)
	}
	seeds := make([]string, 4000)
	for i := range seeds {
		seeds[i] = strconv.Itoa(i + 1)
	}
	from := tinyStudy[strings.Index(tinyStudy, "base:\n"):strings.Index(tinyStudy, "targets:")]
	spec := strings.Replace(tinyStudy, from, "base: {model: "+ck+"}\n", 1) + "seeds: [" + strings.Join(seeds, ", ") + "]\n"
	s, err := ParseSpec([]byte(spec), "")
	if err != nil {
		t.Fatal(err)
	}

	// Through the checks and the data, stopped before the first training.
	out := filepath.Join(t.TempDir(), "study")
	r := &Runner{Spec: s, Out: out, Launch: launch.Spec{Threads: 2}}
	checked := false
	r.Progress = func(p Progress) { checked = checked || p.Phase == preRunCheck }
	r.Stop = func() bool { return r.sel != nil }
	start := time.Now()
	_, err = r.Run()
	var stopped *StoppedError
	if !errors.As(err, &stopped) || !strings.HasPrefix(stopped.Phase, "train ") {
		t.Fatalf("error %v, want a stop before the first training", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the checks of 4,000 seeds took %v", took)
	}
	if !checked {
		t.Error("no progress of the pre-run check")
	}

	// A stop during the checks ends the study in them.
	for _, after := range []int{1, 2, 3} {
		out := filepath.Join(t.TempDir(), "study")
		polls := 0
		r := &Runner{Spec: s, Out: out, Launch: launch.Spec{Threads: 2}, Stop: func() bool { polls++; return polls >= after }}
		_, err := r.Run()
		if !errors.As(err, &stopped) || stopped.Phase != preRunCheck || err.Error() != "experiments: stopped in the pre-run check" {
			t.Errorf("stop at poll %d: error %v, want a stop in the pre-run check", after, err)
		}
		if _, err := os.Stat(filepath.Join(out, "data")); err == nil {
			t.Errorf("stop at poll %d: data written", after)
		}
	}
}

// TestRepeatDataMemory: the training data's documents (targets ×
// repeat) are counted against the host's free memory before any is
// written, which repeat: 10⁹ exhausted (with a 15 GB temporary folder
// left behind); the spec's own bounds refuse such a repeat first
// (TestSpecCountBounds).
func TestRepeatDataMemory(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	t.Setenv(launch.MemoryLimitEnv, "10KiB")
	spec := strings.Replace(tinyStudy, "passages: true, seed: 5}", "passages: true, seed: 5, repeat: 100}", 1)
	out := filepath.Join(t.TempDir(), "study")
	_, _, err := runStudy(t, spec, out, false)
	want := "experiments: targets: the training data's 303 documents (3 targets, each repeated, 0 filler and 3 held out) need about 37.9 KiB of memory to write, but 10.0 KiB is free (MEMTRAIN_MEMORY_LIMIT)"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	entries, _ := os.ReadDir(filepath.Join(out, "data"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".train") || e.Name() == "train" {
			t.Errorf("%s written", e.Name())
		}
	}
}
