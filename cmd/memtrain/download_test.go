package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints/hub/hubtest"
)

const hubCommit = "0123456789abcdef0123456789abcdef01234567"

// hubEnv serves a small checkpoint as the Hub repos acme/tiny and, gated
// behind the token hf_good, acme/gated, on loopback, and points the
// process's HF_ENDPOINT and cache at the server and a fresh folder. It
// returns the server, the checkpoint folder served and the cache.
func hubEnv(t *testing.T) (srv *hubtest.Server, local, cache string) {
	t.Helper()
	local = initSmall(t)
	files := append(hubtest.Folder(t, local), hubtest.File{Path: "pytorch_model.bin", Data: []byte("not taken"), LFS: true})
	repo := func(id string) hubtest.Repo {
		return hubtest.Repo{ID: id, Commits: map[string][]hubtest.File{hubCommit: files}, Refs: map[string]string{"main": hubCommit}}
	}
	gated := repo("acme/gated")
	gated.Gated, gated.Token = true, "hf_good"
	srv = hubtest.New(t, repo("acme/tiny"), gated)
	cache = t.TempDir()
	t.Setenv("HF_ENDPOINT", srv.URL())
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HOME", t.TempDir()) // no token saved by a login
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	return srv, local, cache
}

func TestDownload(t *testing.T) {
	srv, local, cache := hubEnv(t)
	out, errs, code := memtrain(t, "", "download", "acme/tiny")
	if code != 0 {
		t.Fatalf("download failed (%d): %s", code, errs)
	}
	snap := filepath.Join(cache, "models--acme--tiny", "snapshots", hubCommit)
	if out != snap+"\n" {
		t.Errorf("printed %q, want the snapshot folder %s", out, snap)
	}
	if !strings.Contains(errs, "acme/tiny at main (commit 0123456789ab)") {
		t.Errorf("stderr: %q", errs)
	}
	// Every file of the checkpoint, the same bytes; not the PyTorch weights.
	for _, f := range hubtest.Folder(t, local) {
		got, err := os.ReadFile(filepath.Join(snap, f.Path))
		if err != nil || !bytes.Equal(got, f.Data) {
			t.Errorf("%s: %v, or not the bytes served", f.Path, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(snap, "pytorch_model.bin")); err == nil {
		t.Error("downloaded pytorch_model.bin, which a fine-tune does not read")
	}
	srv.Requests()

	// --model acme/tiny is the cached snapshot, which generates as the
	// checkpoint folder does; nothing is asked of the Hub.
	args := []string{"--prompt-ids", "1,450,3186", "--max-new-tokens", "3"}
	want, errs, code := memtrain(t, "", append([]string{"generate", "--model", local}, args...)...)
	if code != 0 {
		t.Fatalf("generate on the folder: %s", errs)
	}
	got, errs, code := memtrain(t, "", append([]string{"generate", "--model", "acme/tiny"}, args...)...)
	if code != 0 || got != want {
		t.Fatalf("generate --model acme/tiny (%d): %q, want %q; %s", code, got, want, errs)
	}
	if !strings.Contains(errs, "memtrain: model: acme/tiny → "+snap) {
		t.Errorf("stderr does not say what acme/tiny resolved to: %q", errs)
	}
	// A second download asks for the file list and no byte.
	if _, errs, code := memtrain(t, "", "download", "acme/tiny"); code != 0 || !strings.Contains(errs, "0 to fetch") {
		t.Errorf("second download (%d): %s", code, errs)
	}
	if rs := srv.Requests(); hubtest.ByteRequests(rs) != 0 || len(rs) != 1 {
		t.Errorf("requests after the download: %+v, want the file list's alone", rs)
	}
}

func TestDownloadErrors(t *testing.T) {
	hubEnv(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string // in the error line
	}{
		{"gated without token", []string{"download", "acme/gated"},
			[]string{"memtrain: download: hub: acme/gated: access refused (HTTP 401", "accept its licence on", "(--token or $HF_TOKEN)"}},
		{"gated with another token", []string{"download", "acme/gated", "--token", "hf_bad"}, []string{"HTTP 403", "the repo is gated"}},
		{"no such repo", []string{"download", "acme/nosuch", "--token", "hf_good"}, []string{"repo acme/nosuch not found"}},
		{"no such revision", []string{"download", "acme/tiny", "--revision", "v2"}, []string{"revision v2 not found in repo acme/tiny"}},
		{"no such file", []string{"download", "acme/tiny", "weights.gguf"}, []string{"file weights.gguf not found in repo acme/tiny at revision main"}},
		{"nothing selected", []string{"download", "acme/tiny", "--exclude", "*"}, []string{"nothing to download", "--include GLOB"}},
		{"not a repo id", []string{"download", "acme/../etc"}, []string{"not a Hub repo id"}},
		{"model not cached", []string{"generate", "--model", "acme/tiny@v1", "--prompt-ids", "1", "--max-new-tokens", "1"},
			[]string{"model acme/tiny@v1: no such file or folder", "is not in the cache", "get it with: memtrain download acme/tiny --revision v1", "--download"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs, code := memtrain(t, "", tc.args...)
			if code == 0 {
				t.Fatal("succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("%q does not say %q", errs, w)
				}
			}
		})
	}
	if _, errs, code := memtrain(t, "", "download", "acme/gated", "--token", "hf_good"); code != 0 {
		t.Errorf("gated with its token: %s", errs)
	}
}

// --download lets generate and finetune fetch a model the cache lacks.
func TestModelDownloadConsent(t *testing.T) {
	_, _, cache := hubEnv(t)
	out, errs, code := memtrain(t, "", "generate", "--model", "acme/tiny", "--download", "--prompt-ids", "1,450", "--max-new-tokens", "2")
	if code != 0 || out == "" {
		t.Fatalf("generate --download (%d): %s", code, errs)
	}
	if !strings.Contains(errs, "acme/tiny at main") {
		t.Errorf("stderr does not say what was downloaded: %q", errs)
	}
	if _, err := os.Stat(filepath.Join(cache, "models--acme--tiny", "refs", "main")); err != nil {
		t.Errorf("no ref after the download: %v", err)
	}

	t.Setenv("HF_HUB_CACHE", t.TempDir())
	_, ds := finetuneFixture(t, "builtin:llama2")
	run := filepath.Join(t.TempDir(), "run")
	args := []string{"finetune", "--model", "acme/tiny", "--data", ds, "--out", run, "--max-steps", "1", "--batch-size", "2", "--micro-batch", "2"}
	if _, errs, code := memtrain(t, "", args...); code == 0 || !strings.Contains(errs, "memtrain download acme/tiny") {
		t.Errorf("finetune of a model not cached, without --download (%d): %s", code, errs)
	}
	if _, errs, code := memtrain(t, "", append(args, "--download")...); code != 0 {
		t.Errorf("finetune --download (%d): %s", code, errs)
	}

	// Every command that reads a model takes the consent: export and
	// merge, inspect, eval loss and eval memorization as finetune and
	// generate.
	for _, c := range [][]string{
		{"export", "acme/tiny", "--out", filepath.Join(t.TempDir(), "hf")},
		{"inspect", "acme/tiny"},
		{"eval", "loss", "--model", "acme/tiny", "--data", writeFile(t, "docs.jsonl", `{"text":"It is a truth universally acknowledged."}`+"\n")},
	} {
		t.Setenv("HF_HUB_CACHE", t.TempDir())
		if _, errs, code := memtrain(t, "", c...); code == 0 || !strings.Contains(errs, "memtrain download acme/tiny") {
			t.Errorf("%v of a model not cached, without --download (%d): %s", c[:2], code, errs)
		}
		if _, errs, code := memtrain(t, "", append(c, "--download")...); code != 0 {
			t.Errorf("%v --download (%d): %s", c[:2], code, errs)
		}
	}
}
