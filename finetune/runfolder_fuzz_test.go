package finetune

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzNames are the names FuzzRunFolder lays out in a folder, each in one
// of the forms fuzzForm picks: the run's own, the lock and marker, and a
// user's file.
var fuzzNames = []string{RunMarkerFile, LockFile, ConfigFile, MetricsFile, DroppedMetricsFile, HistoryFile, FinalDir, CheckpointsDir, "notes.txt"}

// FuzzRunFolder lays out a folder from the input — each name absent, a
// regular file, a folder (checkpoints/ with a latest pointer and step
// folders), or a symbolic link to a file outside — with fuzzed metrics
// lines, starts a run in it as TrainRank does (new, replacing, or
// continuing from a fuzzed step: the lock, prepareFolder, the history and
// the metrics recovery), and checks what must hold whatever the folder
// held:
//   - no file outside the folder changes (a link is never written through);
//   - the user's notes.txt never changes, nor anything in a folder that is
//     not a run's (a refusal changes nothing);
//   - no metrics line is lost: every line is kept in metrics.jsonl or in
//     metrics.jsonl.dropped, and the kept ones are the valid ones of steps
//     up to the run's.
func FuzzRunFolder(f *testing.F) {
	f.Add([]byte{1, 0, 1, 1, 0, 0, 0, 2, 1}, `{"step":1,"loss":3}`+"\n"+`{"step":2,"loss":2}`+"\n", "step-00000002\n", byte(1), 2)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 1, 2, 1}, "", "", byte(0), 0)
	f.Add([]byte{0, 3, 0, 3, 0, 0, 3, 3, 1}, "", "", byte(2), 0)
	f.Add([]byte{1, 1, 1, 1, 0, 0, 0, 2, 1}, `{"step":1}`+"\ngarbage\n"+`{"step":3,"loss":1}`+"\n"+`{"step":4,"lo`, "../../etc\n", byte(1), 3)
	f.Add([]byte{0, 0, 1, 1, 0, 0, 0, 0, 1}, `{"step":1,"loss":3}`, "", byte(0), 0)
	f.Fuzz(func(t *testing.T, forms []byte, metrics, latest string, mode byte, step int) {
		root := t.TempDir()
		dir, outside := filepath.Join(root, "run"), filepath.Join(root, "outside")
		for _, d := range []string{dir, outside} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for i, name := range fuzzNames {
			form := byte(0)
			if i < len(forms) {
				form = forms[i] % 4
			}
			path := filepath.Join(dir, name)
			var err error
			switch form {
			case 1: // a regular file
				content := "the user's " + name
				if name == MetricsFile {
					content = metrics
				}
				err = os.WriteFile(path, []byte(content), 0o644)
			case 2: // a folder
				if err = os.Mkdir(path, 0o755); err == nil && name == CheckpointsDir {
					err = os.WriteFile(filepath.Join(path, LatestFile), []byte(latest), 0o644)
					if err == nil {
						err = os.Mkdir(filepath.Join(path, StepName(2)), 0o755)
					}
				}
			case 3: // a link to a file outside
				target := filepath.Join(outside, name)
				if err = os.WriteFile(target, []byte("outside "+name), 0o644); err == nil {
					err = os.Symlink(target, path)
				}
			}
			if err != nil {
				t.Skip(err)
			}
		}
		outsideBefore, dirBefore := folderFiles(t, outside), folderFiles(t, dir)
		wasRun := isRunFolder(dir)
		step = min(max(step, 0), 1000)

		cont, replace := mode%3 == 1, mode%3 == 2
		unlock, err := Lock(dir)
		if err == nil {
			defer unlock()
			if err = prepareFolder(dir, cont, replace); err == nil {
				prev := previousConfig(dir)
				now := DefaultConfig()
				if _, err = recordHistory(dir, step, prev, &now); err == nil {
					_, err = recoverMetrics(filepath.Join(dir, MetricsFile), step)
				}
			}
		}

		if got := folderFiles(t, outside); !maps.Equal(got, outsideBefore) {
			t.Fatalf("a file outside the folder changed: %v, was %v (err %v)", got, outsideBefore, err)
		}
		after := folderFiles(t, dir)
		if after["notes.txt"] != dirBefore["notes.txt"] {
			t.Fatalf("notes.txt changed (err %v)", err)
		}
		var fe *ForeignFilesError
		if errors.As(err, &fe) || !wasRun && err != nil {
			// A refusal changes nothing but the lock's note.
			for name, b := range dirBefore {
				if name != LockFile && after[name] != b {
					t.Fatalf("refused (%v), yet %s changed", err, name)
				}
			}
		}
		if !wasRun && err == nil {
			// A run started only where no run name was the user's.
			for _, n := range runNames() {
				if _, ok := dirBefore[n]; ok {
					t.Fatalf("started a run over the user's %s", n)
				}
			}
		}
		if err != nil || replace || !cont && !wasRun {
			return
		}
		checkMetricsKept(t, dirBefore[MetricsFile], after[MetricsFile], after[DroppedMetricsFile], dirBefore[DroppedMetricsFile], step)
	})
}

// checkMetricsKept checks that recovery lost no line of before: each is in
// kept or newly in dropped, and kept holds exactly the valid lines of
// steps up to step.
func checkMetricsKept(t *testing.T, before, kept, dropped, droppedBefore string, step int) {
	t.Helper()
	newly := strings.TrimPrefix(dropped, droppedBefore)
	var all []string
	for _, l := range strings.Split(kept+newly, "\n") {
		if strings.TrimSpace(l) != "" {
			all = append(all, l)
		}
	}
	var want, wantKept []string
	for _, l := range strings.Split(before, "\n") {
		l = strings.TrimRight(l, "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		want = append(want, l)
		var m struct {
			Step *int `json:"step"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Step != nil && *m.Step >= 1 && *m.Step <= step {
			wantKept = append(wantKept, l)
		}
	}
	slices.Sort(all)
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("metrics lines lost or made up:\nbefore %q\nkept %q\ndropped %q", before, kept, newly)
	}
	var gotKept []string
	for _, l := range bytes.Split([]byte(kept), []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			gotKept = append(gotKept, string(l))
		}
	}
	slices.Sort(gotKept)
	slices.Sort(wantKept)
	if !slices.Equal(gotKept, wantKept) {
		t.Fatalf("kept %q, want the valid lines of steps ≤ %d: %q", gotKept, step, wantKept)
	}
}
