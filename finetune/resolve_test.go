package finetune

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/checkpoints/hub"
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

// A path that is not there and reads NAMESPACE/NAME[@REVISION] is a Hugging
// Face model in huggingface_hub's cache, laid out here as it lays it out
// (blobs, relative links, refs without a newline); a local folder of that
// name comes first, and a model not in the cache is an error that says so.
func TestResolveHubModel(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	const main, v1 = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	repo := filepath.Join(cache, "models--acme--tiny")
	put := func(rel, body string) {
		t.Helper()
		p := filepath.Join(repo, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(commit, name, blob string) {
		t.Helper()
		p := filepath.Join(repo, "snapshots", commit, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../blobs/"+blob, p); err != nil {
			t.Fatal(err)
		}
	}
	put("blobs/aaaa", "{}")
	put("blobs/bbbb", "weights")
	put("refs/main", main)
	put("refs/v1", v1)
	for _, c := range []string{main, v1} {
		link(c, checkpoints.ConfigFile, "aaaa")
		link(c, "model.safetensors", "bbbb")
	}
	put("refs/config-only", "3333333333333333333333333333333333333333")
	link("3333333333333333333333333333333333333333", checkpoints.ConfigFile, "aaaa")
	snap := func(c string) string { return filepath.Join(repo, "snapshots", c) }

	for _, tc := range []struct {
		name, path, want, err string
	}{
		{name: "main", path: "acme/tiny", want: snap(main)},
		{name: "tag", path: "acme/tiny@v1", want: snap(v1)},
		{name: "commit", path: "acme/tiny@" + v1, want: snap(v1)},
		{name: "not cached", path: "acme/other", err: "Hugging Face model acme/other (revision main) is not in the cache " + cache},
		{name: "no such revision", path: "acme/tiny@v2", err: "no ref of that revision"},
		{name: "no weights", path: "acme/tiny@config-only", err: "has no safetensors weights"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, resolved, err := ResolveModel(tc.path)
			if tc.err != "" {
				var nc *hub.NotCachedError
				if !errors.As(err, &nc) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "model "+tc.path+": no such file or folder") {
					t.Fatalf("err %v, want a NotCachedError naming %s with %q", err, tc.path, tc.err)
				}
				return
			}
			if err != nil || dir != tc.want || !resolved {
				t.Fatalf("got %s, %v, %v; want %s, resolved", dir, resolved, err, tc.want)
			}
		})
	}

	// A PEFT adapter from the Hub names its base by its Hub id.
	adapter := t.TempDir()
	raw, err := checkpoints.AdapterConfigJSON(&checkpoints.AdapterConfig{PEFTType: "LORA", R: 4, LoRAAlpha: 8,
		TargetModules: []string{"q_proj"}, BaseModelNameOrPath: "acme/tiny@v1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(adapter, checkpoints.AdapterConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if ref, _, err := ResolveAdapted(adapter, ""); err != nil || ref.Dir != snap(v1) || ref.Adapter != adapter {
		t.Errorf("ResolveAdapted(adapter on acme/tiny@v1) = %+v, %v; want the base %s", ref, err, snap(v1))
	}

	// A local folder of that name comes first.
	local := t.TempDir()
	t.Chdir(local)
	if err := os.MkdirAll(filepath.Join("acme", "tiny"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("acme", "tiny", checkpoints.ConfigFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if dir, resolved, err := ResolveModel("acme/tiny"); err != nil || dir != "acme/tiny" || resolved {
		t.Errorf("a local acme/tiny resolved to %s, %v, %v; want itself", dir, resolved, err)
	}
}
