package finetune

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/memorization"
)

// extractionConfig is a run of 5 steps on the sweep folders, saving
// every step and keeping every checkpoint, with extraction of the
// dataset's splits every 2 steps (a custom protocol the sweep's short
// random documents fit).
func extractionConfig(t *testing.T) Config {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data, cfg.Out = model, dataset, filepath.Join(t.TempDir(), "run")
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 8, 4, 5
	cfg.SaveEvery, cfg.Keep = 1, 0
	cfg.Schedule.LR = 1e-2
	cfg.Extraction = Extraction{Every: 2, Data: dataset, Protocol: "custom", Prefix: "2", Suffix: 2, Batch: 8}
	return cfg
}

// TestFinetuneExtractionOff: without the block no metrics line has an
// extraction key, and the lines are those of a run whose block names
// data but is off.
func TestFinetuneExtractionOff(t *testing.T) {
	cfg := extractionConfig(t)
	cfg.Extraction = DefaultConfig().Extraction
	var buf bytes.Buffer
	r, err := Open(cfg, cpu.New(cpu.Options{Threads: 1}), "")
	if err != nil {
		t.Fatal(err)
	}
	err = r.Train(&buf, nil)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "extraction") {
		t.Errorf("metrics with the block off mention extraction:\n%s", buf.String())
	}
}

// TestFinetuneExtractionCurve: the metrics line of every 2nd step and of
// the last has the extraction of members and non-members, equal to
// memorization.Evaluate of that step's checkpoint; the others have none;
// a grid measures the same.
func TestFinetuneExtractionCurve(t *testing.T) {
	cfg := extractionConfig(t)
	metrics := trainRun(t, cfg, nil, "", 0)
	if len(metrics) != 5 {
		t.Fatalf("%d metrics lines, want 5", len(metrics))
	}
	docs, err := memorization.LoadDocuments(memorization.DocumentSource{Data: []string{cfg.Data}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := memorization.ParseProtocol("custom", []int{2}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metrics {
		want := m.Step == 2 || m.Step == 4 || m.Step == 5
		if (m.Extraction != nil) != want {
			t.Fatalf("step %d: extraction %+v", m.Step, m.Extraction)
		}
		if !want {
			continue
		}
		e := m.Extraction
		if e.Protocol != "custom-2-2" || e.NonMembers == nil || e.Members.Documents == 0 || e.NonMembers.Documents == 0 {
			t.Fatalf("step %d: extraction %+v", m.Step, e)
		}
		ck, err := checkpoints.Open(m.CheckpointDir)
		if err != nil {
			t.Fatal(err)
		}
		model, err := llama.Load(cpu.New(cpu.Options{Threads: 1}), ck, llama.Options{})
		ck.Close()
		if err != nil {
			t.Fatal(err)
		}
		s, _, err := memorization.Evaluate(model, docs, memorization.EvalConfig{Protocol: p, Bootstrap: memorization.Bootstrap{Resamples: 10}})
		model.Free()
		if err != nil {
			t.Fatal(err)
		}
		g := s.Prefixes[len(s.Prefixes)-1]
		got := []float64{e.Members.Exact, e.Members.Token, e.NonMembers.Exact, e.NonMembers.Token}
		wantV := []float64{g.Members.Exact.Mean, g.Members.TokenMatch.Mean, g.NonMembers.Exact.Mean, g.NonMembers.TokenMatch.Mean}
		if !reflect.DeepEqual(got, wantV) || e.Members.Documents != g.Members.Documents || e.NonMembers.Documents != g.NonMembers.Documents {
			t.Errorf("step %d: extraction %v of %d/%d probes, eval memorization of its checkpoint %v of %d/%d", m.Step,
				got, e.Members.Documents, e.NonMembers.Documents, wantV, g.Members.Documents, g.NonMembers.Documents)
		}
		t.Logf("step %d: members exact %.3f token %.3f, non-members exact %.3f token %.3f", m.Step, got[0], got[1], got[2], got[3])
	}
	cfg.Out = filepath.Join(t.TempDir(), "grid")
	grid := trainRun(t, cfg, &comm.Grid{Data: 2, X: 1, Y: 2, Z: 1}, "", 0)
	for i, m := range grid {
		if !reflect.DeepEqual(m.Extraction, metrics[i].Extraction) {
			t.Errorf("step %d: grid's extraction %+v, one rank's %+v", m.Step, m.Extraction, metrics[i].Extraction)
		}
	}
}

// TestFinetuneExtractionResume: a run stopped after step 3 and resumed
// writes every step's line once, the extraction at steps 2, 4 and 5, as
// the uninterrupted run does.
func TestFinetuneExtractionResume(t *testing.T) {
	cfg := extractionConfig(t)
	want := trainRank(t, cfg, nil, "", 0)
	cfg.Out = filepath.Join(t.TempDir(), "stopped")
	trainRank(t, cfg, nil, "", 3)
	trainRank(t, cfg, nil, cfg.Out, 0)
	f, err := os.Open(filepath.Join(cfg.Out, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []Metrics
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m Metrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines after the resume, want %d", len(got), len(want))
	}
	for i, m := range got {
		if m.Step != i+1 || !reflect.DeepEqual(m.Extraction, want[i].Extraction) {
			t.Errorf("line %d: step %d extraction %+v, uninterrupted step %d %+v", i+1, m.Step, m.Extraction, want[i].Step, want[i].Extraction)
		}
	}
}

// TestValidateExtraction: with every set the block needs data and a
// protocol its lengths make; errors name the key.
func TestValidateExtraction(t *testing.T) {
	for _, tc := range []struct {
		e    Extraction
		want string // "" for valid
	}{
		{Extraction{Protocol: "goldfish", Batch: 8}, ""},
		{Extraction{Every: 2, Data: "d", Protocol: "goldfish", Batch: 8}, ""},
		{Extraction{Every: 2, Data: "d", Protocol: "carlini", Prefix: "8,16", Suffix: 20, Batch: 8}, ""},
		{Extraction{Every: 2, Protocol: "goldfish", Batch: 8}, "extraction: every is 2 but data is empty"},
		{Extraction{Every: 2, Data: "d", Protocol: "nope", Batch: 8}, "extraction: protocol nope"},
		{Extraction{Every: 2, Data: "d", Protocol: "custom", Prefix: "x", Suffix: 2, Batch: 8}, "extraction: prefix: \"x\""},
		{Extraction{Every: 2, Data: "d", Protocol: "goldfish", Batch: 0}, "extraction: batch 0"},
		{Extraction{Every: 2, Data: "a,,b", Protocol: "goldfish", Batch: 8}, "extraction: data:"},
	} {
		c := DefaultConfig()
		c.Model, c.Data, c.Out = "m", "d", "o"
		c.Extraction = tc.e
		err := c.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), "finetune: "+tc.want) {
			t.Errorf("%+v: %v, want %q", tc.e, err, tc.want)
		}
	}
}

// TestFinetuneExtractionFirstPass: first_pass adds the measurement at the
// end of the first epoch (the one-pass extraction) to every N steps' and
// the last's; without it that step has none.
func TestFinetuneExtractionFirstPass(t *testing.T) {
	cfg := extractionConfig(t)
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 16, 8, 0
	cfg.Epochs = 3
	cfg.Extraction.Every, cfg.Extraction.FirstPass = 100, true
	metrics := trainRun(t, cfg, nil, "", 0)
	perEpoch := 0
	for _, m := range metrics {
		if m.Epoch == 0 {
			perEpoch = m.Step
		}
	}
	if n := len(metrics); perEpoch < 1 || perEpoch >= n {
		t.Fatalf("%d steps of which %d in the first epoch: want more than one epoch", n, perEpoch)
	}
	var at []int
	for _, m := range metrics {
		if m.Extraction != nil {
			at = append(at, m.Step)
		}
	}
	if want := []int{perEpoch, len(metrics)}; !reflect.DeepEqual(at, want) {
		t.Errorf("extraction at steps %v, want %v (the end of the first epoch and the last step)", at, want)
	}
	cfg.Extraction.FirstPass = false
	cfg.Out = filepath.Join(t.TempDir(), "off")
	at = nil
	for _, m := range trainRun(t, cfg, nil, "", 0) {
		if m.Extraction != nil {
			at = append(at, m.Step)
		}
	}
	if want := []int{len(metrics)}; !reflect.DeepEqual(at, want) {
		t.Errorf("without first_pass: extraction at steps %v, want %v", at, want)
	}
}
