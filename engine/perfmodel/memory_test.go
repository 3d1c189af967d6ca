package perfmodel

import (
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/llama"
)

func TestShardParams(t *testing.T) {
	small := smallConfig(t)
	for _, c := range []struct {
		cfg  *checkpoints.Config
		g    Grid
		want int64
	}{
		// Per layer q 4096 + k, v 2048 each + o 4096 + gate, up, down 8192
		// each = 36864; two layers 73728; embedding and head 16384 each;
		// norms 5 × 64.
		{small, Grid{1, 1, 1, 1}, 73728 + 2*16384 + 5*64},
		{small, Grid{7, 1, 1, 1}, 73728 + 2*16384 + 5*64},
		// X·Y·Z = 4 shards every matrix; norms split over X only.
		{small, Grid{2, 2, 1, 2}, (73728+2*16384)/4 + 5*32},
		{small, Grid{1, 1, 2, 2}, (73728+2*16384)/4 + 5*64},
	} {
		if got := ShardParams(c.cfg, c.g); got != c.want {
			t.Errorf("%v: %d parameters, want %d", c.g, got, c.want)
		}
	}
	// One rank holds the whole model, tied or not.
	for _, name := range []string{"tiny", "llama3.2-1b", "llama3.1-8b", "llama3.1-405b"} {
		cfg := preset(t, name)
		if got, want := ShardParams(cfg, Grid{1, 1, 1, 1}), cfg.Params().Total; got != want {
			t.Errorf("%s: %d parameters on one rank, want %d", name, got, want)
		}
	}
}

func TestEstimateMemory(t *testing.T) {
	cfg := smallConfig(t)
	s := Step{Grid: Grid{Data: 2, X: 2, Y: 1, Z: 2}, SeqLen: 8, MicroBatch: 1, MicroBatches: 2}
	const p = 26784 // ShardParams, above
	for _, c := range []struct {
		o         Options
		workspace int64
	}{
		// The largest gathered unit is a decoder layer (18432 elements of
		// (x,y) blocks) in bf16, twice with prefetching; the largest single
		// block is the embedding or head's 8192 in fp32.
		{Options{}, 2*18432*2 + 8192*4},
		{Options{NoOverlap: true}, 18432*2 + 8192*4},
	} {
		m, err := EstimateMemory(cfg, s, c.o)
		if err != nil {
			t.Fatal(err)
		}
		if m.Weights != 6*p || m.Gradients != 4*p || m.Optimizer != 8*p || m.Workspace != c.workspace {
			t.Errorf("%+v: %+v, want weights %d, gradients %d, optimizer %d, workspace %d", c.o, m, 6*p, 4*p, 8*p, c.workspace)
		}
		if m.Total() != m.Weights+m.Gradients+m.Optimizer+m.Activations+m.Workspace {
			t.Errorf("total %d", m.Total())
		}
	}
	// Without Z nothing is gathered.
	s.Grid = Grid{Data: 4, X: 2, Y: 1, Z: 1}
	if m, _ := EstimateMemory(cfg, s, Options{}); m.Workspace != 0 {
		t.Errorf("z=1 workspace %d", m.Workspace)
	}
	if _, err := EstimateMemory(cfg, Step{Grid: Grid{1, 1, 1, 5}, SeqLen: 8, MicroBatch: 1, MicroBatches: 1}, Options{}); err == nil {
		t.Error("Z=5 accepted")
	}
}

// TestActivationsMatchEngine checks the activation itemization against
// the CPU engine's own workspace plan: float32 everywhere and a saved
// log-sum-exp per row (flash attention, as the engine's backends keep it)
// reproduce llama.ActivationBytes on one rank, and on a grid
// they reproduce it for a model whose dimensions are the rank's shares.
func TestActivationsMatchEngine(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		cfg := preset(t, name)
		for _, rec := range []bool{false, true} {
			for _, bt := range [][2]int{{1, 16}, {3, 32}} {
				got := activationMemory(cfg, Grid{1, 1, 1, 1}, bt[0], bt[1], rec, AttentionFlash, 4, 4)
				want := llama.ActivationBytes(cfg, bt[0], bt[1], true, rec)
				if got != want {
					t.Errorf("%s b=%d T=%d recompute=%v: %d bytes, engine allocates %d", name, bt[0], bt[1], rec, got, want)
				}
			}
		}
	}
	cfg := smallConfig(t)
	g := Grid{Data: 3, X: 2, Y: 2, Z: 5}
	share := cfg.Clone()
	share.HiddenSize /= g.X
	share.NumAttentionHeads /= g.Y
	share.NumKeyValueHeads /= g.Y
	share.IntermediateSize /= g.Y
	share.VocabSize /= g.Y
	for _, rec := range []bool{false, true} {
		got := activationMemory(cfg, g, 2, 8, rec, AttentionFlash, 4, 4)
		if want := llama.ActivationBytes(share, 2, 8, true, rec); got != want {
			t.Errorf("grid %v recompute=%v: %d bytes, engine with per-rank shapes %d", g, rec, got, want)
		}
	}
}

// TestActivationsBF16 checks the GPU itemization by hand for the small
// model on X=2, Y=2 (hidden share 32, q 32, kv 16, intermediate 64, vocab
// 128, 2 heads), one micro-batch of 2 sequences of 8 tokens (N = 16), bf16
// activations, fp32 statistics and logits, flash attention.
func TestActivationsBF16(t *testing.T) {
	cfg := smallConfig(t)
	g := Grid{Data: 1, X: 2, Y: 2, Z: 1}
	const N = 16
	tokens := int64(7 * N * 4) // ids, targets, pos, weights, losses, report weights and losses
	inputs := int64(3 * N * 32 * 2)
	layer := int64(N*32*2 + N*4 + // ln1, rstd1
		N*32*2 + 2*N*16*2 + N*2*4 + N*32*2 + // q, k, v, log-sum-exp, att
		2*N*32*2 + N*4 + // h, ln2, rstd2
		3*N*64*2) // gate, up, act
	final := int64(N*32*2 + N*4 + N*128*4)
	grads := int64(5*N*32*2 + 2*N*32*2 + 2*N*16*2 + 3*N*64*2)
	for _, c := range []struct {
		recompute bool
		layers    int64
	}{{false, 2}, {true, 1}} {
		s := Step{Grid: g, SeqLen: 8, MicroBatch: 2, MicroBatches: 1, Recompute: c.recompute}
		m, err := EstimateMemory(cfg, s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if want := tokens + inputs + c.layers*layer + final + grads; m.Activations != want {
			t.Errorf("recompute=%v: %d bytes, want %d", c.recompute, m.Activations, want)
		}
		// Saving probabilities instead costs [b, heads/Y, T, T] per layer.
		mp, _ := EstimateMemory(cfg, s, Options{Attention: AttentionProbs})
		if d, want := mp.Activations-m.Activations, c.layers*(2*2*8*8*2-N*2*4); d != want {
			t.Errorf("recompute=%v: probabilities add %d bytes, want %d", c.recompute, d, want)
		}
	}
}
