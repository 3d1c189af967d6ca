package finetune

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
)

func TestResolveModel(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ck := filepath.Join("run", CheckpointsDir, StepName(1280))
	write(filepath.Join(ck, checkpoints.ConfigFile), "{}")
	write(filepath.Join("run", CheckpointsDir, LatestFile), StepName(1280)+"\n")
	write(filepath.Join("base", checkpoints.ConfigFile), "{}")
	write(filepath.Join("broken", CheckpointsDir, LatestFile), "step-00000009\n")
	write(filepath.Join("empty", "notes.txt"), "")
	at := func(rel string) string { return filepath.Join(root, rel) }

	for _, tc := range []struct {
		name, path, want, err string
		resolved              bool
	}{
		{name: "checkpoint folder", path: at("base"), want: at("base")},
		{name: "training checkpoint", path: at(ck), want: at(ck)},
		{name: "run folder", path: at("run"), want: at(ck), resolved: true},
		{name: "latest file", path: at(filepath.Join("run", CheckpointsDir, LatestFile)), want: at(ck), resolved: true},
		{name: "latest names a missing checkpoint", path: at("broken"), err: "which has no config.json"},
		{name: "none of the three", path: at("empty"), err: "not a checkpoint folder (with config.json), a run folder (with checkpoints/latest) or a checkpoints/latest file"},
		{name: "another file", path: at(filepath.Join("empty", "notes.txt")), err: "not a checkpoint folder"},
		{name: "missing", path: at("nowhere"), err: "nowhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, resolved, err := ResolveModel(tc.path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.path) {
					t.Fatalf("err %v, want one naming %s with %q", err, tc.path, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if dir != tc.want || resolved != tc.resolved {
				t.Errorf("got %s, %v; want %s, %v", dir, resolved, tc.want, tc.resolved)
			}
		})
	}
}
