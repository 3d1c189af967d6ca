package perfmodel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/inputfile"
)

// A Measurement is one rank's training step as `memtrain bench step`
// measured it (on a GPU: --device cuda): a model of Params parameters,
// one micro-batch of Batch sequences of SeqLen tokens, with or without
// recomputation, at a precision, in StepSeconds (forward, backward,
// AdamW and the step's read). Options.Measured replaces the modelled
// kernel time of the steps it matches.
type Measurement struct {
	Params      int64
	Batch       int
	SeqLen      int
	Recompute   bool // full recomputation (a bench step knows no other)
	Precision   engine.Precision
	StepSeconds float64
	// Source says where it was read, for the plan's source.
	Source string
}

// ReadMeasurements reads the JSON lines `memtrain bench step` prints
// (one a run; blank lines skipped).
func ReadMeasurements(path string) ([]Measurement, error) {
	raw, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("perfmodel: %w", err)
	}
	var out []Measurement
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r struct {
			Params    int64   `json:"params"`
			Batch     int     `json:"batch"`
			SeqLen    int     `json:"seq_len"`
			Recompute bool    `json:"recompute"`
			Precision string  `json:"precision"`
			StepMS    float64 `json:"step_ms_median"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("perfmodel: %s:%d: %w", path, n, err)
		}
		prec, err := engine.ParsePrecision(r.Precision)
		if err != nil {
			return nil, fmt.Errorf("perfmodel: %s:%d: %w", path, n, err)
		}
		if r.Params < 1 || r.Batch < 1 || r.SeqLen < 1 || !(r.StepMS > 0) || math.IsInf(r.StepMS, 1) {
			return nil, fmt.Errorf("perfmodel: %s:%d: not a bench step result (want positive params, batch, seq_len and step_ms_median)", path, n)
		}
		out = append(out, Measurement{Params: r.Params, Batch: r.Batch, SeqLen: r.SeqLen, Recompute: r.Recompute, Precision: prec,
			StepSeconds: r.StepMS / 1e3, Source: fmt.Sprintf("%s:%d", path, n)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("perfmodel: %s: %w", path, err)
	}
	return out, nil
}

// measured is the measurement that stands for step s's kernels at o's
// precision, if one does: of a model of cfg's size, one rank's work as
// the step's ranks do it — a grid that splits nothing of the model
// (data-parallel replicas compute what one rank does), the micro-batch,
// sequence length, recomputation and precision the measurement's.
func (o Options) measured(cfg *checkpoints.Config, s Step) (Measurement, bool) {
	g := s.Grid
	if g.X*g.Y*g.Z != 1 || o.Fused { // bench step measures the unfused step
		return Measurement{}, false
	}
	for _, m := range o.Measured {
		if m.Params == cfg.Params().Total && m.Batch == s.MicroBatch && m.SeqLen == s.SeqLen && m.recompute() == s.Recompute && m.Precision == o.Precision {
			return m, true
		}
	}
	return Measurement{}, false
}

// recompute is m's recomputation as the engine names it.
func (m Measurement) recompute() llama.Recompute {
	if m.Recompute {
		return llama.RecomputeFull
	}
	return llama.RecomputeNone
}

// applyMeasured replaces st's kernel time by m's: a measured step is
// one micro-batch and the optimizer's update, so a step of n
// micro-batches is n × (measured − modelled update) + modelled update;
// the classes keep their modelled shares of it.
func (st stepTimes) applyMeasured(m Measurement, micro int) stepTimes {
	total := st.byClass.Total()
	want := float64(micro)*(m.StepSeconds-st.optimizer) + st.optimizer
	if micro == 1 {
		want = m.StepSeconds
	}
	f := want / total
	k := &st.byClass
	k.GEMM, k.Attention, k.Memory, k.Host = f*k.GEMM, f*k.Attention, f*k.Memory, f*k.Host
	st.optimizer *= f
	st.lastBackward *= f
	st.source = fmt.Sprintf("measured: bench step (%s)", m.Source)
	if micro > 1 {
		st.source += fmt.Sprintf(" for each of %d micro-batches, the optimizer's update modelled", micro)
	}
	st.source += "; the classes' shares modelled"
	return st
}
