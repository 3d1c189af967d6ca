package finetune

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/internal/inputfile"
	"github.com/memtrain/memtrain/internal/options"
)

// A run's identity is what a resume must share with the steps it continues
// (the settings tagged resume:"same"): recorded in every checkpoint's
// trainer state, key by key, and compared key by key, so that a refusal
// names each setting that differs and its two values. The model and the
// data are identified by content, not by path: a byte-identical dataset
// moved elsewhere resumes, a dataset rebuilt in place with another
// seq_len or a base re-initialised at the same path does not.
//
// max_steps is not part of it: a resumed run may be given more steps. The
// schedule keeps the length the first run gave it (config.yaml records
// schedule.total), so extending a run continues at the schedule's final
// rate; to stretch the schedule instead, set schedule.total.

// identity returns the run's identity: the resume:"same" settings but
// max_steps, with the model's and the data's content digests for their
// paths.
func (r *Run) identity() (map[string]string, error) {
	id := map[string]string{}
	for _, v := range options.Values(&r.Config) {
		if v.Resume && v.Key != "max_steps" {
			id[v.Key] = v.Value
		}
	}
	model, err := modelDigest(r.Config.Model)
	if err != nil {
		return nil, err
	}
	id["model"] = model
	id["data"] = datasetDigest(r.Store.Manifest())
	return id, nil
}

// modelDigest identifies a base checkpoint by content: a training
// checkpoint by its manifest's file hashes (every byte, hashed when it was
// saved), any other by checkpoints.Fingerprint.
func modelDigest(dir string) (string, error) {
	if isFile(filepath.Join(dir, ManifestFile)) {
		raw, err := inputfile.ReadFile(filepath.Join(dir, ManifestFile))
		if err != nil {
			return "", fmt.Errorf("finetune: %w", err)
		}
		man, err := ParseManifest(raw)
		if err != nil {
			return "", fmt.Errorf("finetune: %s: %w", filepath.Join(dir, ManifestFile), err)
		}
		h := sha256.New()
		for _, name := range slices.Sorted(maps.Keys(man.Files)) {
			fmt.Fprintf(h, "%s %d %s\n", name, man.Files[name].Size, man.Files[name].SHA256)
		}
		return "manifest-sha256:" + hex.EncodeToString(h.Sum(nil)), nil
	}
	return checkpoints.Fingerprint(dir)
}

// datasetDigest identifies a dataset by what its manifest records of its
// contents (the tokenizer, the settings, the counts and splits, every
// file's SHA-256), not by where it is or which files it was made from.
func datasetDigest(m *data.Manifest) string {
	b, _ := json.Marshal(struct {
		Tokenizer data.TokenizerInfo
		Settings  data.Settings
		Counts    data.Counts
		Splits    data.Splits
		Files     map[string]data.FileInfo
	}{m.Tokenizer, m.Settings, m.Counts, m.Splits, m.Files})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// An IdentityError says that a checkpoint was saved by a run with other
// settings than the one resuming it, naming each.
type IdentityError struct {
	Checkpoint string
	Diffs      []IdentityDiff
}

// IdentityDiff is one setting of an IdentityError.
type IdentityDiff struct{ Key, Saved, Now string }

func (e *IdentityError) Error() string {
	var parts []string
	for _, d := range e.Diffs {
		parts = append(parts, fmt.Sprintf("%s: %s (checkpoint), %s (now)", d.Key, orNone(d.Saved), orNone(d.Now)))
	}
	return fmt.Sprintf("finetune: %s was saved by a run with other settings; resume needs the same: %s", e.Checkpoint, strings.Join(parts, "; "))
}

func orNone(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// checkIdentity compares a checkpoint's saved identity with the run's.
func checkIdentity(path string, saved, now map[string]string) error {
	var diffs []IdentityDiff
	for _, k := range slices.Sorted(maps.Keys(now)) {
		if s, ok := saved[k]; !ok || s != now[k] {
			if !ok && k != "model" && k != "data" {
				continue // a setting newer than the checkpoint: its default then
			}
			diffs = append(diffs, IdentityDiff{Key: k, Saved: saved[k], Now: now[k]})
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return &IdentityError{Checkpoint: path, Diffs: diffs}
}
