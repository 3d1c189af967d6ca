package experiments

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/finetune"
)

// oneArmStudy is tinyStudy with one arm and two steps of pretraining and
// training: the smallest study that makes and uses a cached base.
func oneArmStudy() string {
	s := strings.Replace(tinyStudy, "  - {name: goldfish-k2, loss: goldfish, goldfish: {k: 2, h: 3}}\n", "", 1)
	return strings.Replace(s, "max_steps: 4,", "max_steps: 2,", 1)
}

// runVersion runs spec at version (the cache key's) into a new folder and returns the folder
// and the runner's log.
func runVersion(t *testing.T, spec, version string) (out, log string) {
	t.Helper()
	s, err := ParseSpec([]byte(spec), "")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	out = filepath.Join(t.TempDir(), "study")
	r := &Runner{Spec: s, Out: out, Launch: launch.Spec{Threads: 2}, Log: &buf, Version: version}
	if _, err := r.Run(); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	return out, buf.String()
}

// TestRunnerBaseCache: studies share a cached base made from the same
// settings, tokenizer, pretraining and version; any change makes another.
func TestRunnerBaseCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(CacheEnv, cache)
	oneArm := oneArmStudy()
	var out string
	run := func(spec, version string) string {
		t.Helper()
		var log string
		out, log = runVersion(t, spec, version)
		return log
	}
	first := run(oneArm, "v1")
	if !strings.Contains(first, "pretrain: 2 steps") || !strings.Contains(first, "made in the cache "+filepath.Join(cache, "bases")) {
		t.Fatalf("first study:\n%s", first)
	}
	// The study records the cached model it starts from.
	recs, _ := filepath.Glob(filepath.Join(out, "base", "*.json"))
	if len(recs) != 1 {
		t.Fatalf("%d base records", len(recs))
	}
	if rec, _ := os.ReadFile(recs[0]); !strings.Contains(string(rec), filepath.Join(cache, "bases")) {
		t.Errorf("record %s", rec)
	}
	lr := strings.Replace(oneArm, "train: {max_steps: 2, batch_size: 2, micro_batch: 2}", "train: {max_steps: 2, batch_size: 2, micro_batch: 2, schedule: {lr: 5.0e-4}}", 1)
	for _, c := range []struct {
		name, spec, version string
		reused              bool
	}{
		{"same base", oneArm, "v1", true},
		{"another pretraining learning rate", lr, "v1", false},
		{"another version", oneArm, "v2", false},
	} {
		log := run(c.spec, c.version)
		reused := strings.Contains(log, "reused from the cache")
		pretrained := strings.Contains(log, "pretrain:")
		if reused != c.reused || pretrained == c.reused {
			t.Errorf("%s: reused %v, pretrained %v:\n%s", c.name, reused, pretrained, log)
		}
	}
	bases, _ := filepath.Glob(filepath.Join(cache, "bases", "*", "base.json"))
	if len(bases) != 3 {
		t.Errorf("%d cached bases, want 3", len(bases))
	}
	if _, err := os.Stat(filepath.Join(cache, "bases")); err != nil {
		t.Error(err)
	}
}

// TestDamagedCachedBase (issue 32, item 7): a cached base whose weights
// changed after it was made is not reused: the study says so and makes
// it again, and its numbers are those of the intact base.
func TestDamagedCachedBase(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(CacheEnv, cache)
	run := func() (string, []byte) {
		t.Helper()
		out, log := runVersion(t, oneArmStudy(), "v1")
		// Every result.json of the study, in path order.
		var res []byte
		filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Name() == "result.json" {
				b, _ := os.ReadFile(p)
				rel, _ := filepath.Rel(out, p)
				res = append(append(res, rel+"\n"...), b...)
			}
			return err
		})
		if len(res) == 0 {
			t.Fatalf("no result.json in %s", out)
		}
		return log, res
	}
	_, want := run()
	recs, _ := filepath.Glob(filepath.Join(cache, "bases", "*", "base.json"))
	if len(recs) != 1 {
		t.Fatalf("%d cached bases", len(recs))
	}
	var rec struct{ Model string }
	if b, err := os.ReadFile(recs[0]); err != nil || json.Unmarshal(b, &rec) != nil || rec.Model == "" {
		t.Fatalf("%s: %v", recs[0], err)
	}
	weights, _ := filepath.Glob(filepath.Join(filepath.Dir(recs[0]), rec.Model, "*.safetensors"))
	if len(weights) == 0 {
		t.Fatal("no cached weights")
	}
	f, err := os.OpenFile(weights[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, 4096)
	b[0] ^= 0x10
	f.WriteAt(b, 4096)
	f.Close()
	log, got := run()
	if !strings.Contains(log, "damaged:") || !strings.Contains(log, "SHA-256 differs") || strings.Contains(log, "reused from the cache") {
		t.Errorf("the damaged base was not remade:\n%s", log)
	}
	if !bytes.Equal(stripTimes(got), stripTimes(want)) {
		t.Errorf("the study on the remade base differs from the first:\n%s\n%s", got, want)
	}
}

// TestLockBase: a study waits for another that is making the same base,
// then takes the lock.
func TestLockBase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bases", "tiny-0")
	release, err := finetune.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	r := &Runner{Log: &log}
	got := make(chan error)
	go func() {
		unlock, err := r.lockBase(dir)
		if err == nil {
			unlock()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("took a held lock: %v", err)
	case <-time.After(700 * time.Millisecond):
	}
	release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "base "+dir+": waiting for pid ") {
		t.Errorf("log %q", log.String())
	}
}

// TestRunnerSeedPerRun: with base: {seed_per_run: true} each of the
// study's seeds starts from a base initialised with that seed — its own
// cached base, the same one a study whose base seed is that seed makes —
// and a checkpoint base cannot ask for it.
func TestRunnerSeedPerRun(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(CacheEnv, cache)
	oneArm := oneArmStudy()
	run := func(spec string) (string, string) {
		t.Helper()
		return runVersion(t, spec, "v1")
	}
	perRun := strings.Replace(oneArm, "  seed: 2\n", "  seed: 2\n  seed_per_run: true\n", 1) + "seeds: [1, 3]\n"
	out, log := run(perRun)
	if n := strings.Count(log, "made in the cache"); n != 2 {
		t.Errorf("%d bases made for two seeds, want 2:\n%s", n, log)
	}
	recs, _ := filepath.Glob(filepath.Join(out, "base", "*.json"))
	if len(recs) != 2 {
		t.Errorf("%d base records, want one a seed", len(recs))
	}
	// Seed 3's base is the one a study of base seed 3 makes.
	_, log = run(strings.Replace(oneArm, "  seed: 2\n", "  seed: 3\n", 1))
	if !strings.Contains(log, "reused from the cache") {
		t.Errorf("a study of base seed 3 did not reuse seed 3's base:\n%s", log)
	}
	bad := "name: x\nbase: {model: /nonexistent, seed_per_run: true}\ntargets: {data: [builtin:sotu], count: 1, min_tokens: 8, max_tokens: 16}\narms: [{name: a, loss: standard}]\n"
	if _, err := ParseSpec([]byte(bad), ""); err == nil || !strings.Contains(err.Error(), "seed_per_run: only a preset base") {
		t.Errorf("a checkpoint base with seed_per_run: %v", err)
	}
}

// stripTimes drops the wall times ("seconds") from a result.json, the
// one thing two runs of a study may differ in.
func stripTimes(b []byte) []byte {
	return regexp.MustCompile(`"seconds":\s*[0-9.e+-]+`).ReplaceAll(b, []byte(`"seconds":0`))
}
