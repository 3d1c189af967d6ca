package engine

import (
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
)

func TestModelFLOPsPerToken(t *testing.T) {
	p, err := checkpoints.LookupPreset("llama3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	// N excludes the embedding lookup (128256·4096) and keeps the head.
	if got, want := MatmulParams(cfg), int64(8_030_261_248-128256*4096); got != want {
		t.Errorf("matmul params %d, want %d", got, want)
	}
	// 6N + 12·L·heads·D·T at T = 8192.
	want := 6*float64(8_030_261_248-128256*4096) + 12*32*32*128*8192.0
	if got := ModelFLOPsPerToken(cfg, 8192); got != want {
		t.Errorf("flops/token %g, want %g", got, want)
	}
	tied, _ := checkpoints.LookupPreset("llama3.2-1b")
	if got := MatmulParams(tied.Config()); got != tied.Config().Params().Total {
		t.Errorf("tied: the head multiplies, so N = total params; got %d", got)
	}
}
