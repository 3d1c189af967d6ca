package llama

import (
	"fmt"

	"github.com/memtrain/memtrain/engine"
)

// Recompute says which of a layer's activations a training pass drops in
// the forward pass and recomputes in the backward pass (Options.Recompute,
// Work.Recompute). The modes are ordered by the memory they save, and by
// the time they cost.
type Recompute uint8

const (
	// RecomputeNone keeps every layer's activations.
	RecomputeNone Recompute = iota
	// RecomputeSelective keeps every layer's input and GEMM and attention
	// outputs (the adapters' z too), and drops the elementwise ones that
	// are cheap to make again — the RMSNorm outputs ln1 and ln2 with their
	// float32 1/rms, and SwiGLU's product act — which it recomputes into
	// one shared set just before each layer's backward (the last layer's
	// are still there from the forward), with the forward's own calls on
	// the forward's inputs, so bit for bit as the forward made them. It
	// saves (2·H + I) elements and 2 float32 a token a layer (H the
	// hidden size, I the intermediate size, each this rank's share) and
	// runs no GEMM or attention twice. On X ranks a recomputed norm sums
	// its rows' squares over X again, one all-reduce of N float32, as
	// the forward did: rebuilding the output from a saved 1/rms instead
	// would round differently, for rmsnorm forms each row's scale from a
	// float64 that the float32 1/rms has lost.
	RecomputeSelective
	// RecomputeFull keeps only each layer's input and runs the layer's
	// whole forward again before its backward: about one extra forward of
	// compute for the largest cut in activation memory.
	RecomputeFull
)

var recomputeNames = [...]string{RecomputeNone: "none", RecomputeSelective: "selective", RecomputeFull: "full"}

// String is the mode's name: "none", "selective" or "full".
func (r Recompute) String() string {
	if int(r) < len(recomputeNames) {
		return recomputeNames[r]
	}
	return fmt.Sprintf("Recompute(%d)", uint8(r))
}

// ParseRecompute reads a mode's name, as String writes it.
func ParseRecompute(s string) (Recompute, error) {
	for r, name := range recomputeNames {
		if s == name {
			return Recompute(r), nil
		}
	}
	return 0, fmt.Errorf("llama: recomputation %q (want none, selective or full)", s)
}

// MarshalText writes the mode's name (JSON and YAML write it so).
func (r Recompute) MarshalText() ([]byte, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	return []byte(r.String()), nil
}

// UnmarshalText reads the mode's name.
func (r *Recompute) UnmarshalText(b []byte) error {
	v, err := ParseRecompute(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

func (r Recompute) check() error {
	if r > RecomputeFull {
		return fmt.Errorf("llama: unknown recomputation mode %d", uint8(r))
	}
	return nil
}

// recomputeSelective remakes layer l's activations that selective
// recomputation does not keep — act from gate and up, ln2 from h, ln1
// from the layer's input x — in the shared buffers a points to, before
// the layer's backward reads them. Each is the forward's own call on the
// forward's inputs (rmsnorm rewrites rstd with the values it holds), so
// the backward reads what the forward wrote, bit for bit.
func (m *Model) recomputeSelective(l int, a *layerActs, x *engine.Tensor, s *scratch) {
	p := m.Layers[l]
	m.backend.SwiGLU(a.act, a.gate, a.up)
	m.rmsnorm(a.ln2, a.rstd2, a.h, p.MLPNorm, s)
	m.rmsnorm(a.ln1, a.rstd1, x, p.AttnNorm, s)
}
