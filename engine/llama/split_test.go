package llama

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
)

// TestSplitMaster: a split-master model holds each matrix's master as its
// bf16 copy and a residual (no float32 Value; norms keep theirs), loads
// weights into them exactly (GatherWeights gives back the float32s it
// was set to), and is refused where it cannot be held.
func TestSplitMaster(t *testing.T) {
	cfg := testConfig(false, 2)
	b := cpu.New(cpu.Options{Threads: 1})
	m, err := New(b, cfg, Options{Activations: engine.BF16, SplitMaster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	for _, p := range m.Params() {
		if split := p.Low != nil; split != (p.Copy != nil) || split == (p.Value != nil) {
			t.Errorf("%s: value %v, copy %v, low %v", p.Name, p.Value, p.Copy, p.Low)
		}
	}
	weights := checkpoints.RandomWeights(cfg, 5)
	if err := m.SetWeights(weights); err != nil {
		t.Fatal(err)
	}
	got, err := m.GatherWeights()
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range weights {
		for j, x := range w.Data {
			if got[i].Data[j] != x {
				t.Fatalf("%s[%d]: %v after a split and a join, set %v", w.Name, j, got[i].Data[j], x)
			}
		}
	}
	for _, c := range []struct {
		name string
		b    engine.Backend
		opt  Options
		want string
	}{
		{"f32 activations", b, Options{SplitMaster: true}, "bf16 activations"},
		{"adapters", b, Options{SplitMaster: true, Activations: engine.BF16, BaseDType: engine.BF16,
			LoRA: &checkpoints.AdapterConfig{PEFTType: "LORA", R: 2, LoRAAlpha: 4, TargetModules: []string{"q_proj"}}}, "no adapters"},
		{"backend", struct{ engine.Backend }{b}, Options{SplitMaster: true, Activations: engine.BF16}, "float32 masters only"},
	} {
		if _, err := New(c.b, cfg, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
