package finetune

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
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
		{Extraction{Every: 2, Data: "d", Protocol: "chat", Batch: 8}, ""},
		{Extraction{Every: 2, Data: "d", Protocol: "chat", Prefix: "0", Suffix: 20, Batch: 8}, ""},
		{Extraction{Every: 2, Data: "d", Protocol: "chat", Prefix: "1,2", Batch: 8}, "extraction: protocol chat: memorization: chat protocol: one answer prefix length"},
		{Extraction{Every: 2, Data: "d", Protocol: "pythia", Prefix: "0", Batch: 8}, "extraction: protocol pythia: memorization: pythia protocol: prefix length 0 (want > 0)"},
		{Extraction{Every: 2, Data: "d", Protocol: "custom", Prefix: "-1", Suffix: 2, Batch: 8}, "extraction: prefix: \"-1\" is not a length in tokens"},
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

// chatFolders are the sweep's model and a chat dataset of random
// conversations over its vocabulary: each a prompt (mask 0) and an answer
// (mask 1), twice; a sixth held out.
func chatFolders(t *testing.T) (model, dataset string) {
	t.Helper()
	model, _ = sweepFolders(t)
	cfg := sweepConfig()
	dataset = filepath.Join(t.TempDir(), "chat")
	w, err := data.CreateStore(dataset, data.TokenizerInfo{SHA256: "none", VocabSize: cfg.VocabSize, BOS: -1, EOS: -1},
		data.Settings{Mode: data.ModeDocument, SeqLen: 16, Chat: &data.ChatSettings{Template: "custom", TemplateSHA256: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(6, 6))
	for i := range 24 {
		doc := data.Document{Source: "random", Line: int64(i + 1), Split: data.Train}
		if i%6 == 0 {
			doc.Split = data.Holdout
		}
		for range 2 {
			for k := range 3 + r.IntN(3) + 3 {
				doc.IDs = append(doc.IDs, int32(r.IntN(cfg.VocabSize)))
				doc.Mask = append(doc.Mask, uint8(min(1, k/3))) // 3 prompt tokens, then the answer
			}
		}
		if _, err := w.Add(doc); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(nil, nil); err != nil {
		t.Fatal(err)
	}
	return model, dataset
}

// TestFinetuneExtractionChat: protocol chat measures a chat dataset's
// answers while training, as eval memorization of the step's checkpoint
// does; on a dataset without a loss mask the run does not open.
func TestFinetuneExtractionChat(t *testing.T) {
	model, dataset := chatFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data, cfg.Out = model, dataset, filepath.Join(t.TempDir(), "run")
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 4, 4, 2
	cfg.Schedule.LR = 1e-2
	cfg.Extraction = Extraction{Every: 2, Data: dataset, Protocol: "chat", Prefix: "0", Suffix: 2, Batch: 8}
	metrics := trainRun(t, cfg, nil, "", 0)
	e := metrics[len(metrics)-1].Extraction
	if e == nil || e.Protocol != "chat-0-2" || e.Members.Documents != 40 || e.NonMembers == nil || e.NonMembers.Documents != 8 {
		t.Fatalf("extraction %+v", e)
	}
	docs, err := memorization.LoadDocuments(memorization.DocumentSource{Data: []string{dataset}, Chat: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoints.Open(metrics[len(metrics)-1].CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := llama.Load(cpu.New(cpu.Options{Threads: 1}), ck, llama.Options{})
	ck.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	s, _, err := memorization.Evaluate(m, docs, memorization.EvalConfig{Protocol: memorization.Chat(0, 2), Bootstrap: memorization.Bootstrap{Resamples: 10}})
	if err != nil {
		t.Fatal(err)
	}
	g := s.Prefixes[0]
	if want := (memorization.ExtractionGroup{Documents: g.Members.Documents, Exact: g.Members.Exact.Mean, Token: g.Members.TokenMatch.Mean}); e.Members != want {
		t.Errorf("extraction %+v, eval memorization of the checkpoint %+v", e.Members, want)
	}

	_, plain := sweepFolders(t)
	cfg.Data, cfg.Extraction.Data, cfg.Out = plain, plain, filepath.Join(t.TempDir(), "plain")
	cfg.BatchSize, cfg.MicroBatch = 8, 4
	r, err := Open(cfg, cpu.New(cpu.Options{Threads: 1}), "")
	if err == nil {
		r.Close()
	}
	if want := "finetune: extraction: data " + plain + ": memorization: the chat protocol needs a chat dataset (memtrain data prepare --chat): " + plain + " has no loss mask"; err == nil || err.Error() != want {
		t.Errorf("a dataset without a mask: %v, want %q", err, want)
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
