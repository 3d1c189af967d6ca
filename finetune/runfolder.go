package finetune

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/inputfile"
	"github.com/memtrain/memtrain/internal/options"
)

// RunMarkerFile marks a folder as a run folder that memtrain made: written
// before anything else of a new run, it says that the names a run writes
// there (runNames) are memtrain's, to replace or remove. A folder without
// it, and without a run's files from before markers existed, holds the
// user's files: a run never starts in it over one of those names, and
// nothing in it is removed, whatever the flags.
const RunMarkerFile = ".memtrain-run"

// runNames are the names a run writes in its folder, besides its lock and
// marker.
func runNames() []string {
	return []string{CheckpointsDir, ConfigFile, MetricsFile, DroppedMetricsFile, HistoryFile, FinalDir}
}

// A ForeignFilesError says that a folder that is not a run's holds files
// under the names a run would write: they are the user's, and a run
// neither overwrites nor removes them.
type ForeignFilesError struct {
	Dir   string
	Names []string
}

func (e *ForeignFilesError) Error() string {
	return fmt.Sprintf("finetune: %s is not a run folder but holds %s, which a run writes: they are not memtrain's, so nothing replaces them; train in another folder or move them",
		e.Dir, strings.Join(e.Names, ", "))
}

// isRunFolder reports whether memtrain made dir a run folder: it has the
// marker, or (a run from before markers) a run's files.
func isRunFolder(dir string) bool {
	if fi, err := os.Lstat(filepath.Join(dir, RunMarkerFile)); err == nil && fi.Mode().IsRegular() {
		return true
	}
	return existingRun(dir) != nil
}

// foreignNames lists the names a run writes that dir holds although it
// is not a run folder (nil when it is one, or holds none of them).
func foreignNames(dir string) ([]string, error) {
	if isRunFolder(dir) {
		return nil, nil
	}
	var names []string
	for _, n := range runNames() {
		_, err := os.Lstat(filepath.Join(dir, n))
		switch {
		case err == nil:
			names = append(names, n)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("finetune: %w", err)
		}
	}
	return names, nil
}

// claimRunFolder makes dir a run folder (its marker written, synced) unless
// it is one, refusing a folder that holds a run's names it did not write.
func claimRunFolder(dir string) error {
	names, err := foreignNames(dir)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		return &ForeignFilesError{Dir: dir, Names: names}
	}
	if fi, err := os.Lstat(filepath.Join(dir, RunMarkerFile)); err == nil && fi.Mode().IsRegular() {
		return nil
	}
	return atomicfile.WriteFile(filepath.Join(dir, RunMarkerFile), []byte("memtrain run folder: its checkpoints, config.yaml, metrics.jsonl and final are memtrain's\n"))
}

// HistoryFile records every start of a run in its folder, one JSON line
// each: when, from which step, and each setting that differs from what
// config.yaml held before (config.yaml is the configuration of the steps
// from then on; the history keeps what the earlier steps used).
const HistoryFile = "history.jsonl"

// A HistoryEntry is one line of HistoryFile.
type HistoryEntry struct {
	Time    string          `json:"time"` // RFC 3339, UTC
	Step    int             `json:"step"` // the steps done before this start
	Changes []SettingChange `json:"changes,omitempty"`
}

// A SettingChange is one setting that differs from the run's previous
// configuration.
type SettingChange struct {
	Key string `json:"key"`
	Was string `json:"was"`
	Now string `json:"now"`
}

// settingChanges compares the configuration config.yaml held (prev, nil
// when there was none) with the one the run starts with. A path that is
// the same folder made absolute is not a change.
func settingChanges(prev *Config, now *Config) []SettingChange {
	if prev == nil {
		return nil
	}
	was := map[string]string{}
	for _, v := range options.Values(prev) {
		was[v.Key] = v.Value
	}
	var out []SettingChange
	for _, v := range options.Values(now) {
		w := was[v.Key]
		if w == v.Value || (w != "" && absList(w) == v.Value) {
			continue
		}
		out = append(out, SettingChange{Key: v.Key, Was: w, Now: v.Value})
	}
	return out
}

// recordHistory appends the run's start to dir's HistoryFile and returns
// a warning listing the changed settings of a resumed run ("" when none).
func recordHistory(dir string, step int, prev, now *Config) (string, error) {
	e := HistoryEntry{Time: time.Now().UTC().Format(time.RFC3339), Step: step, Changes: settingChanges(prev, now)}
	b, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("finetune: %w", err)
	}
	f, err := openNoFollow(filepath.Join(dir, HistoryFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return "", fmt.Errorf("finetune: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("finetune: %w", err)
	}
	if step == 0 || len(e.Changes) == 0 {
		return "", nil
	}
	var parts []string
	for _, c := range e.Changes {
		parts = append(parts, fmt.Sprintf("%s %s → %s", c.Key, orNone(c.Was), orNone(c.Now)))
	}
	return fmt.Sprintf("finetune: %s: resumed at step %d with changed settings: %s (recorded in %s)", dir, step, strings.Join(parts, ", "), HistoryFile), nil
}

// previousConfig reads the configuration a run folder's config.yaml holds
// (nil when it has none, or one that no longer parses: the history then
// records no changes).
func previousConfig(dir string) *Config {
	raw, err := inputfile.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil
	}
	c := DefaultConfig()
	if options.Decode(filepath.Join(dir, ConfigFile), raw, &c) != nil {
		return nil
	}
	return &c
}

// withAbsolutePaths returns c with its paths absolute (the model, the
// data, the LoRA initialisation and the extraction's files), as a run
// records them in config.yaml so that it resumes from any working folder
// and after its folder moves.
func (c Config) withAbsolutePaths() Config {
	c.Model, c.Data, c.Out = absList(c.Model), absList(c.Data), absList(c.Out)
	c.LoRA.Init = absList(c.LoRA.Init)
	c.Extraction.Data, c.Extraction.NonMembers = absList(c.Extraction.Data), absList(c.Extraction.NonMembers)
	return c
}

// absList makes each path of a comma-separated list absolute ("" stays "").
func absList(s string) string {
	if s == "" {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if p == "" {
			continue
		}
		if a, err := filepath.Abs(p); err == nil {
			parts[i] = a
		}
	}
	return strings.Join(parts, ",")
}
