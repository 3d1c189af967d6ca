package perfmodel

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
)

// preset returns a preset's configuration or fails the test.
func preset(t testing.TB, name string) *checkpoints.Config {
	t.Helper()
	p, err := checkpoints.LookupPreset(name)
	if err != nil {
		t.Fatal(err)
	}
	return p.Config()
}

// smallConfig is the hand-computed shape of the tests: hidden 64, 2
// layers, 4 heads of 16, 2 kv heads, intermediate 128, vocabulary 256,
// untied head.
func smallConfig(t testing.TB) *checkpoints.Config {
	t.Helper()
	c := preset(t, "tiny")
	c.HiddenSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 64, 2, 4, 2, 16
	c.IntermediateSize, c.VocabSize, c.TieWordEmbeddings = 128, 256, false
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestValidate(t *testing.T) {
	llama8b := preset(t, "llama3.1-8b")
	small := smallConfig(t)
	oddI := smallConfig(t)
	oddI.NumKeyValueHeads, oddI.IntermediateSize = 4, 130
	oddV := smallConfig(t)
	oddV.VocabSize = 257
	for _, c := range []struct {
		cfg  *checkpoints.Config
		g    Grid
		want string // "" for valid
	}{
		{llama8b, Grid{1, 1, 1, 1}, ""},
		{llama8b, Grid{4, 8, 8, 16}, ""},
		{llama8b, Grid{1, 3, 1, 1}, "X=3 does not divide hidden_size 4096"},
		{llama8b, Grid{1, 1, 3, 1}, "Y=3 does not divide num_attention_heads 32"},
		{llama8b, Grid{1, 1, 16, 1}, "Y=16 does not divide num_key_value_heads 8"},
		{oddI, Grid{1, 1, 4, 1}, "Y=4 does not divide intermediate_size 130"},
		{oddV, Grid{1, 1, 2, 1}, "Y=2 does not divide vocab_size 257"},
		{small, Grid{1, 1, 1, 3}, "Z=3 does not divide model.embed_tokens.weight's (x,y) block"},
		{small, Grid{1, 64, 2, 64}, "Z=64 does not divide"},
		{small, Grid{0, 1, 1, 1}, "every axis needs at least one rank"},
	} {
		err := c.g.Validate(c.cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: unexpected error %v", c.g, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: error %v, want it to say %q", c.g, err, c.want)
		}
	}
}

func TestWeightBlocks(t *testing.T) {
	g := Grid{1, 2, 4, 1}
	want := map[string][2]int{ // [rows, cols] of the (x,y) block
		"q_proj": {16, 32}, "k_proj": {8, 32}, "v_proj": {8, 32}, "o_proj": {32, 16},
		"gate_proj": {32, 32}, "up_proj": {32, 32}, "down_proj": {32, 32},
		"embed_tokens": {64, 32}, "lm_head": {64, 32},
	}
	ws := weights(smallConfig(t))
	if len(ws) != len(want) {
		t.Fatalf("%d weights, want %d", len(ws), len(want))
	}
	for _, w := range ws {
		r, c := w.block(g)
		if [2]int{r, c} != want[w.role.String()] {
			t.Errorf("%s block %d×%d, want %v", w.role.String(), r, c, want[w.role.String()])
		}
	}
}

// factorizations counts the ordered 4-factorizations of n.
func factorizations(n int) []Grid {
	var out []Grid
	for d := 1; d <= n; d++ {
		for x := 1; d*x <= n; x++ {
			for y := 1; d*x*y <= n; y++ {
				if n%(d*x*y) == 0 {
					out = append(out, Grid{d, x, y, n / (d * x * y)})
				}
			}
		}
	}
	return out
}

func TestGrids(t *testing.T) {
	for _, c := range []struct {
		model string
		gpus  int
		want  int
	}{
		// 64 = 2⁶ has C(9,3) = 84 ordered 4-factorizations; Y must divide
		// the 8 kv heads, which removes the 6 + 3 + 1 with Y = 16, 32, 64.
		{"llama3.1-8b", 64, 74},
		{"llama3.1-8b", 1, 1},
		// 8 = 2³: C(6,3) = 20; tiny (hidden 128, 4 heads, 2 kv heads) allows
		// Y ∈ {1, 2}: the 3 with Y = 4 and the 1 with Y = 8 go.
		{"tiny", 8, 16},
		// A prime count: 7 divides no head count, hidden size or weight
		// block, so only data parallelism takes it.
		{"llama3.1-8b", 7, 1},
	} {
		cfg := preset(t, c.model)
		gs := Grids(cfg, c.gpus)
		if len(gs) != c.want {
			t.Errorf("%s on %d: %d grids, want %d: %v", c.model, c.gpus, len(gs), c.want, gs)
		}
		valid := map[Grid]bool{}
		for _, g := range gs {
			valid[g] = true
		}
		for _, g := range factorizations(c.gpus) {
			if (g.Validate(cfg) == nil) != valid[g] {
				t.Errorf("%s on %d: %v enumerated %v, Validate says %v", c.model, c.gpus, g, valid[g], g.Validate(cfg))
			}
		}
	}
}

func TestInterNode(t *testing.T) {
	for _, c := range []struct {
		g    Grid
		node int
		want string // the groups that cross nodes, in Groups order
	}{
		{Grid{2, 2, 2, 2}, 8, "data data-z"},
		{Grid{1, 8, 1, 4}, 8, "z data-z"},
		{Grid{1, 16, 1, 1}, 8, "x"},
		{Grid{4, 1, 1, 1}, 8, ""},              // one node holds the job
		{Grid{1, 3, 1, 2}, 8, ""},              // six ranks on one node
		{Grid{2, 3, 1, 1}, 4, "x data data-z"}, // X groups of 3 straddle 4-GPU nodes
		{Grid{4, 2, 2, 2}, 4, "z data data-z"},
		{Grid{1, 1, 1, 1}, 8, ""},
		{Grid{2, 1, 1, 8}, 8, "data data-z"},
		{Grid{2, 4, 1, 1}, 8, ""}, // data-z: 2 ranks 4 apart
	} {
		var got []string
		for _, grp := range Groups() {
			if c.g.InterNode(grp, c.node) {
				got = append(got, grp)
			}
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%v on nodes of %d: inter-node groups %q, want %q", c.g, c.node, got, c.want)
		}
	}
}

func TestStrides(t *testing.T) {
	g := Grid{Data: 5, X: 2, Y: 3, Z: 4}
	for _, c := range []struct {
		group        string
		size, stride int
	}{{GroupX, 2, 1}, {GroupY, 3, 2}, {GroupZ, 4, 6}, {GroupData, 5, 24}, {GroupDataZ, 20, 6}} {
		if g.GroupSize(c.group) != c.size || g.Stride(c.group) != c.stride {
			t.Errorf("%s: size %d stride %d, want %d %d", c.group, g.GroupSize(c.group), g.Stride(c.group), c.size, c.stride)
		}
	}
	if g.Size() != 120 {
		t.Errorf("size %d", g.Size())
	}
}

func TestDivisors(t *testing.T) {
	for n, want := range map[int]string{1: "[1]", 12: "[1 2 3 4 6 12]", 16: "[1 2 4 8 16]", 7: "[1 7]"} {
		if got := fmt.Sprint(divisors(n)); got != want {
			t.Errorf("divisors(%d) = %s, want %s", n, got, want)
		}
	}
}
