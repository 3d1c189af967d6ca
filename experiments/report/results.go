package report

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/inputfile"
	"github.com/memtrain/memtrain/memorization"
)

// The layout of an experiment's output folder (the runner in package
// experiments writes it; this package reads the arms and writes the
// report):
//
//	OUT/spec.yaml                         the spec the run started with
//	OUT/base/NAME/                        base models made from a preset (pretrained)
//	OUT/data/                             the prepared datasets
//	OUT/arms/ARM-sSEED/train/             the fine-tuning run (metrics.jsonl, checkpoints)
//	OUT/arms/ARM-sSEED/eval/PROTO/        summary.json and docs.jsonl of each protocol
//	OUT/arms/ARM-sSEED/result.json        an ArmResult, written last: the arm is done
//	OUT/report.md, results.csv, plots/    the report
const (
	ResultFile  = "result.json"
	SummaryFile = memorization.SummaryFileName
	DocsFile    = memorization.DocsFileName
	MetricsFile = finetune.MetricsFile // in the arm's train folder
)

// ResultSchema is the version of ArmResult.
const ResultSchema = 1

// ArmResult is one finished arm and seed: everything the report needs,
// with paths relative to the experiment's folder.
type ArmResult struct {
	Schema int    `json:"schema"`
	Arm    string `json:"arm"`
	Seed   uint64 `json:"seed"`
	// Loss is "standard" or "goldfish"; K, Strategy and H describe the
	// goldfish loss (K = 0 for standard).
	Loss     string `json:"loss"`
	K        int    `json:"k,omitempty"`
	Strategy string `json:"strategy,omitempty"`
	H        int    `json:"h,omitempty"`
	// Model is the base model (a preset name or a folder), Params its
	// parameter count and NonEmbeddingParams the count less the token
	// embedding (and an untied LM head): the size a scaling study compares
	// (0 in results written before it was recorded).
	Model              string `json:"model"`
	Params             int64  `json:"params"`
	NonEmbeddingParams int64  `json:"non_embedding_params,omitempty"`
	// Adapter describes a LoRA arm's adapter ("LoRA r16 α32 on 7
	// projections"), TrainedParams its parameter count; empty and 0 for
	// full fine-tuning, which trains every parameter.
	Adapter       string `json:"adapter,omitempty"`
	TrainedParams int64  `json:"trained_params,omitempty"`
	// Targets is the number of target documents, Repeats how many times
	// each was seen in training (epochs × repetitions in the data).
	Targets int `json:"targets"`
	Repeats int `json:"repeats"`
	Steps   int `json:"steps"`
	// TargetRepetitions is, in a canary study, how many copies of each
	// target the training data holds, by document id (the targets are
	// documents 0 to Targets−1); each was seen that many times per epoch.
	// Empty otherwise (every target is in the data Repeats ÷ epochs times).
	TargetRepetitions []int `json:"target_repetitions,omitempty"`
	// FinalTrainLoss is the mean loss of the last epoch's steps (over kept
	// targets); HeldoutLoss the mean loss on the held-out documents after
	// training (nats per token), HeldoutPerplexity its exponential.
	FinalTrainLoss    float64 `json:"final_train_loss"`
	HeldoutLoss       float64 `json:"heldout_loss"`
	HeldoutPerplexity float64 `json:"heldout_perplexity"`
	// BaseHeldoutLoss is the base model's loss on the held-out documents,
	// before fine-tuning: what HeldoutLoss is to be compared with.
	BaseHeldoutLoss float64 `json:"base_heldout_loss,omitempty"`
	// FillerHeldout is the number of filler documents held out of the
	// training data (targets: filler: holdout); FillerHeldoutLoss is the
	// arm's mean loss on them after training and BaseFillerHeldoutLoss
	// the base model's, their ratio the arm's utility on the filler's
	// domain (0 without held-out filler).
	FillerHeldout         int     `json:"filler_heldout,omitempty"`
	FillerHeldoutLoss     float64 `json:"filler_heldout_loss,omitempty"`
	BaseFillerHeldoutLoss float64 `json:"base_filler_heldout_loss,omitempty"`
	TrainDir              string  `json:"train_dir"` // holds metrics.jsonl
	Evals                 []Eval  `json:"evals"`
	Seconds               float64 `json:"seconds"` // wall time of training and evaluation
}

// repetitions is how many copies of document d the training data held,
// for a canary target; false for a held-out document or outside a canary
// study.
func (r *ArmResult) repetitions(d memorization.DocResult) (int, bool) {
	if !d.Member || d.Doc < 0 || d.Doc >= len(r.TargetRepetitions) {
		return 0, false
	}
	return r.TargetRepetitions[d.Doc], true
}

// Eval is one protocol's evaluation of an arm.
type Eval struct {
	Key     string               `json:"key"` // e.g. goldfish-50, names the folder
	Dir     string               `json:"dir"` // holds summary.json and docs.jsonl
	Summary memorization.Summary `json:"summary"`
}

// Eval returns the evaluation of protocol key, or nil.
func (r *ArmResult) Eval(key string) *Eval {
	for i := range r.Evals {
		if r.Evals[i].Key == key {
			return &r.Evals[i]
		}
	}
	return nil
}

// Name is the arm's folder name: ARM-sSEED.
func (r *ArmResult) Name() string { return ArmDirName(r.Arm, r.Seed) }

// ArmDirName is the folder name of an arm and seed under OUT/arms:
// ARM-sSEED.
func ArmDirName(arm string, seed uint64) string { return fmt.Sprintf("%s-s%d", arm, seed) }

// Load reads the results of every finished arm of the experiment in
// dir, ordered as the arms were run (by arm name order of the folder, then
// seed) — unfinished arms are left out.
func Load(dir string) ([]ArmResult, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "arms", "*", ResultFile))
	if err != nil {
		return nil, err
	}
	var out []ArmResult
	for _, p := range paths {
		b, err := inputfile.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		var r ArmResult
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("report: %s: %w", p, err)
		}
		if r.Schema != ResultSchema {
			return nil, fmt.Errorf("report: %s: schema %d, want %d", p, r.Schema, ResultSchema)
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b ArmResult) int {
		if c := strings.Compare(a.Arm, b.Arm); c != 0 {
			return c
		}
		return int(a.Seed) - int(b.Seed)
	})
	return out, nil
}

// Metrics reads the training metrics of a run of the results folder dir:
// TrainDir's metrics.jsonl, or the arm's default train folder when the
// result names none.
func (r *ArmResult) Metrics(dir string) ([]finetune.Metrics, error) {
	trainDir := r.TrainDir
	if trainDir == "" {
		trainDir = filepath.Join("arms", r.Name(), "train")
	}
	return ReadMetrics(filepath.Join(dir, trainDir, MetricsFile))
}

// ReadMetrics reads a training run's metrics.jsonl.
func ReadMetrics(path string) ([]finetune.Metrics, error) {
	b, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var out []finetune.Metrics
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var m finetune.Metrics
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return nil, fmt.Errorf("report: %s:%d: %w", path, i+1, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// Docs reads the per-document results of the run's evaluation e from the
// results folder dir: e.Dir's docs.jsonl, or the arm's default eval
// folder when the result names none.
func (r *ArmResult) Docs(dir string, e *Eval) ([]memorization.DocResult, error) {
	evalDir := e.Dir
	if evalDir == "" {
		evalDir = filepath.Join("arms", r.Name(), "eval", e.Key)
	}
	return ReadDocs(filepath.Join(dir, evalDir, DocsFile))
}

// ReadDocs reads an evaluation's docs.jsonl.
func ReadDocs(path string) ([]memorization.DocResult, error) {
	b, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var out []memorization.DocResult
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var d memorization.DocResult
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			return nil, fmt.Errorf("report: %s:%d: %w", path, i+1, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// FinalTrainLoss is a run's final training loss: the mean loss of the
// steps of its last epoch (one step's loss is too noisy to compare arms).
// Results, report.md and the study's log all use it. It is 0 without
// metrics.
func FinalTrainLoss(metrics []finetune.Metrics) float64 {
	n := len(metrics)
	if n == 0 {
		return 0
	}
	last := metrics[n-1].Epoch
	sum, k := 0.0, 0
	for _, m := range metrics {
		if m.Epoch == last {
			sum += m.Loss
			k++
		}
	}
	return sum / float64(k)
}

// ModelLabel is the model an arm trained: its base, and its adapter if it
// has one (arms of one label are compared with each other).
func (a *ArmResult) ModelLabel() string {
	if a.Adapter == "" {
		return a.Model
	}
	return a.Model + " + " + a.Adapter
}
