package perfmodel

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"

	"github.com/memtrain/memtrain/internal/numtest"
)

func TestRingFactor(t *testing.T) {
	for _, c := range []struct {
		op   string
		p    int
		want float64
	}{
		{OpAllReduce, 1, 0}, {OpAllReduce, 2, 1}, {OpAllReduce, 4, 1.5}, {OpAllReduce, 8, 1.75},
		{OpAllGather, 1, 0}, {OpAllGather, 2, 0.5}, {OpAllGather, 8, 0.875},
		{OpReduceScatter, 4, 0.75}, {OpReduceScatter, 1024, 1023.0 / 1024},
	} {
		if got := RingFactor(c.op, c.p); got != c.want {
			t.Errorf("RingFactor(%s, %d) = %g, want %g", c.op, c.p, got, c.want)
		}
	}
	c := Collective{Op: OpAllGather, Elements: 1000, Calls: 3, Bytes: 2, RingFactor: RingFactor(OpAllGather, 4)}
	if c.SentElements() != 2250 || c.SentBytes() != 4500 {
		t.Errorf("sent %g elements, %g bytes; want 2250, 4500", c.SentElements(), c.SentBytes())
	}
}

// key identifies a collective in the hand-computed tables.
type key struct{ name, group, op string }

type want struct {
	elements     int64
	bytes, calls int
	overlap      Overlap
}

func byKey(t *testing.T, cs []Collective) map[key]Collective {
	t.Helper()
	m := map[key]Collective{}
	for _, c := range cs {
		k := key{c.Name, c.Group, c.Op}
		if _, dup := m[k]; dup {
			t.Errorf("collective %v listed twice", k)
		}
		if c.GroupSize < 2 {
			t.Errorf("%v over a group of %d", k, c.GroupSize)
		}
		m[k] = c
	}
	return m
}

func checkCollectives(t *testing.T, cs []Collective, wants map[key]want) {
	t.Helper()
	got := byKey(t, cs)
	for k, w := range wants {
		c, ok := got[k]
		if !ok {
			t.Errorf("missing %v", k)
			continue
		}
		if c.Elements != w.elements || c.Bytes != w.bytes || c.Calls != w.calls || c.Overlap != w.overlap {
			t.Errorf("%v: elements %d bytes %d calls %d %v; want %d %d %d %v", k, c.Elements, c.Bytes, c.Calls, c.Overlap, w.elements, w.bytes, w.calls, w.overlap)
		}
	}
	for k := range got {
		if _, ok := wants[k]; !ok {
			t.Errorf("unexpected %v: %+v", k, got[k])
		}
	}
}

// TestCollectivesByHand checks every call of a step of the small model
// (hidden 64, 2 layers, q 64, kv 32, intermediate 128, vocab 256, untied) on
// dp=2 x=2 y=1 z=2: micro-batches of one 8-token sequence (m = 8), two
// micro-batches (n = 2). Y has one rank, so nothing runs over Y.
func TestCollectivesByHand(t *testing.T) {
	cfg := smallConfig(t)
	s := Step{Grid: Grid{Data: 2, X: 2, Y: 1, Z: 2}, SeqLen: 8, MicroBatch: 1, MicroBatches: 2}
	const (
		B = Blocking
		H = HiddenByCompute
		E = HiddenByLastBackward
	)
	ar, ag, rs := OpAllReduce, OpAllGather, OpReduceScatter
	// Linears: forward over X of m·out (q 8·64, k/v 8·32, gate/up 8·128),
	// L·n = 4 calls; transposed o and down all-reduce their backward input
	// gradient over X (8·64, 8·128). Z blocks out·in/X: q 2048, k/v 1024,
	// o 2048, gate/up/down 4096; data shards are half of that, once per
	// layer and step.
	wants := map[key]want{
		{"input_layernorm sum of squares", "x", ar}:                {8, 4, 4, B},
		{"input_layernorm backward sum", "x", ar}:                  {8, 4, 4, B},
		{"input_layernorm weight gradient", "data-z", ar}:          {32, 4, 2, E},
		{"post_attention_layernorm sum of squares", "x", ar}:       {8, 4, 4, B},
		{"post_attention_layernorm backward sum", "x", ar}:         {8, 4, 4, B},
		{"post_attention_layernorm weight gradient", "data-z", ar}: {32, 4, 2, E},
		{"norm sum of squares", "x", ar}:                           {8, 4, 2, B},
		{"norm backward sum", "x", ar}:                             {8, 4, 2, B},
		{"norm weight gradient", "data-z", ar}:                     {32, 4, 1, E},
		{"q_proj forward output", "x", ar}:                         {512, 4, 4, B},
		{"k_proj forward output", "x", ar}:                         {256, 4, 4, B},
		{"v_proj forward output", "x", ar}:                         {256, 4, 4, B},
		{"o_proj backward input gradient", "x", ar}:                {512, 4, 4, H},
		{"gate_proj forward output", "x", ar}:                      {1024, 4, 4, B},
		{"up_proj forward output", "x", ar}:                        {1024, 4, 4, B},
		{"down_proj backward input gradient", "x", ar}:             {1024, 4, 4, H},
		{"lm_head forward output", "x", ar}:                        {2048, 4, 2, B},
		{"q_proj weight (forward)", "z", ag}:                       {2048, 4, 4, H},
		{"q_proj weight (backward)", "z", ag}:                      {2048, 4, 4, H},
		{"q_proj gradient", "z", rs}:                               {2048, 4, 4, H},
		{"q_proj gradient", "data", ar}:                            {1024, 4, 2, E},
		{"k_proj weight (forward)", "z", ag}:                       {1024, 4, 4, H},
		{"k_proj weight (backward)", "z", ag}:                      {1024, 4, 4, H},
		{"k_proj gradient", "z", rs}:                               {1024, 4, 4, H},
		{"k_proj gradient", "data", ar}:                            {512, 4, 2, E},
		{"v_proj weight (forward)", "z", ag}:                       {1024, 4, 4, H},
		{"v_proj weight (backward)", "z", ag}:                      {1024, 4, 4, H},
		{"v_proj gradient", "z", rs}:                               {1024, 4, 4, H},
		{"v_proj gradient", "data", ar}:                            {512, 4, 2, E},
		{"o_proj weight (forward)", "z", ag}:                       {2048, 4, 4, H},
		{"o_proj weight (backward)", "z", ag}:                      {2048, 4, 4, H},
		{"o_proj gradient", "z", rs}:                               {2048, 4, 4, H},
		{"o_proj gradient", "data", ar}:                            {1024, 4, 2, E},
		{"gate_proj weight (forward)", "z", ag}:                    {4096, 4, 4, H},
		{"gate_proj weight (backward)", "z", ag}:                   {4096, 4, 4, H},
		{"gate_proj gradient", "z", rs}:                            {4096, 4, 4, H},
		{"gate_proj gradient", "data", ar}:                         {2048, 4, 2, E},
		{"up_proj weight (forward)", "z", ag}:                      {4096, 4, 4, H},
		{"up_proj weight (backward)", "z", ag}:                     {4096, 4, 4, H},
		{"up_proj gradient", "z", rs}:                              {4096, 4, 4, H},
		{"up_proj gradient", "data", ar}:                           {2048, 4, 2, E},
		{"down_proj weight (forward)", "z", ag}:                    {4096, 4, 4, H},
		{"down_proj weight (backward)", "z", ag}:                   {4096, 4, 4, H},
		{"down_proj gradient", "z", rs}:                            {4096, 4, 4, H},
		{"down_proj gradient", "data", ar}:                         {2048, 4, 2, E},
		{"embed_tokens weight (forward)", "z", ag}:                 {8192, 4, 2, H},
		{"embed_tokens gradient", "z", rs}:                         {8192, 4, 2, H},
		{"embed_tokens gradient", "data", ar}:                      {4096, 4, 1, E},
		{"lm_head weight (forward)", "z", ag}:                      {8192, 4, 2, H},
		{"lm_head gradient", "z", rs}:                              {8192, 4, 2, H},
		{"lm_head gradient", "data", ar}:                           {4096, 4, 1, E},
	}
	cs, err := Collectives(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	checkCollectives(t, cs, wants)

	// Sent elements per rank and group, summed by hand: ring factors are 1
	// for an all-reduce and 1/2 for the others over two ranks, 3/2 for an
	// all-reduce over the four data-z ranks.
	//   x:      activations 22528 (q 2048, k 1024, v 1024, o 2048, gate,
	//           up, down 4096 each, lm_head 4096) + norm statistics 160
	//   z:      3 × ½ × 2 × 2 layers × 18432 + 2 × ½ × 2 × 8192 for each of
	//           the embedding and the head (a forward gather and a
	//           reduce-scatter: the head's backward reuses its forward's
	//           gather)
	//   data:   every matrix shard once: ShardParams 26784 − 5 norms × 32
	//   data-z: 3/2 × 5 norms × 32
	sent := map[string]float64{}
	for _, c := range cs {
		if p := s.Grid.GroupSize(c.Group); c.GroupSize != p || c.RingFactor != RingFactor(c.Op, p) {
			t.Errorf("%s: group of %d, ring factor %g", c.Name, c.GroupSize, c.RingFactor)
		}
		sent[c.Group] += c.SentElements()
	}
	for grp, w := range map[string]float64{"x": 22688, "y": 0, "z": 143360, "data": 26624, "data-z": 240} {
		if sent[grp] != w {
			t.Errorf("%s sends %g elements a step, want %g", grp, sent[grp], w)
		}
	}
	if p := ShardParams(cfg, s.Grid); float64(p-5*32) != sent["data"] {
		t.Errorf("ShardParams %d, data all-reduce %g", p, sent["data"])
	}

	// Recomputation repeats the decoder layers' forward all-reduces, and
	// nothing else.
	s.Recompute = llama.RecomputeFull
	cr, err := Collectives(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	doubled := map[string]bool{
		"input_layernorm sum of squares": true, "post_attention_layernorm sum of squares": true,
		"q_proj forward output": true, "k_proj forward output": true, "v_proj forward output": true,
		"gate_proj forward output": true, "up_proj forward output": true,
	}
	base := byKey(t, cs)
	for _, c := range cr {
		w := base[key{c.Name, c.Group, c.Op}].Calls
		if doubled[c.Name] {
			w *= 2
		}
		if c.Calls != w {
			t.Errorf("recompute: %s over %s: %d calls, want %d", c.Name, c.Group, c.Calls, w)
		}
	}

	// Selective recomputation sums the norms' squares again for every
	// layer but the last, and repeats nothing else.
	s.Recompute = llama.RecomputeSelective
	cr, err = Collectives(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	L := cfg.NumHiddenLayers
	for _, c := range cr {
		w := base[key{c.Name, c.Group, c.Op}].Calls
		if strings.HasSuffix(c.Name, "layernorm sum of squares") {
			w = w / L * (2*L - 1)
		}
		if c.Calls != w {
			t.Errorf("selective: %s over %s: %d calls, want %d", c.Name, c.Group, c.Calls, w)
		}
	}
	if len(cr) != len(cs) {
		t.Errorf("selective: %d collectives, want %d", len(cr), len(cs))
	}
}

// TestCollectivesY checks the Y side on dp=1 x=1 y=2 z=1 with two
// micro-batches of two 8-token sequences (m = 16): the q/k/v and gate/up
// backward (one all-reduce per shared input), the o/down forward, the
// embedding and head, and the cross-entropy's statistics.
func TestCollectivesY(t *testing.T) {
	cfg := smallConfig(t)
	s := Step{Grid: Grid{Data: 1, X: 1, Y: 2, Z: 1}, SeqLen: 8, MicroBatch: 2, MicroBatches: 2}
	ar := OpAllReduce
	const (
		B = Blocking
		H = HiddenByCompute
	)
	wants := map[key]want{
		{"embed_tokens forward output", "y", ar}:                        {16 * 64, 4, 2, B},
		{"q_proj, k_proj, v_proj backward input gradient", "y", ar}:     {16 * 64, 4, 4, H},
		{"o_proj forward output", "y", ar}:                              {16 * 64, 4, 4, B},
		{"gate_proj, up_proj backward input gradient", "y", ar}:         {16 * 64, 4, 4, H},
		{"down_proj forward output", "y", ar}:                           {16 * 64, 4, 4, B},
		{"cross-entropy max logit", "y", OpAllGather}:                   {16 * 2, 4, 2, B},
		{"cross-entropy sum of exponentials and target logit", "y", ar}: {2 * 16, 4, 2, B},
		{"lm_head backward input gradient", "y", ar}:                    {16 * 64, 4, 2, H},
	}
	cs, err := Collectives(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	checkCollectives(t, cs, wants)

	// With recomputation the forward outputs are all-reduced twice, but
	// for down_proj's: the recomputed forward stops before it.
	s.Recompute = llama.RecomputeFull
	cr, err := Collectives(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	got := byKey(t, cr)
	if c := got[key{"o_proj forward output", "y", ar}]; c.Calls != 8 {
		t.Errorf("recompute: o_proj forward output %d calls, want 8", c.Calls)
	}
	if c := got[key{"down_proj forward output", "y", ar}]; c.Calls != 4 {
		t.Errorf("recompute: down_proj forward output %d calls, want 4", c.Calls)
	}
}

func TestCollectivesTied(t *testing.T) {
	cfg := smallConfig(t)
	cfg.TieWordEmbeddings = true
	s := Step{Grid: Grid{Data: 2, X: 1, Y: 1, Z: 4}, SeqLen: 8, MicroBatch: 1, MicroBatches: 3}
	cs, err := Collectives(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	got := byKey(t, cs)
	const name = "embed_tokens (tied lm_head)"
	for k, w := range map[key]want{
		{name + " weight (forward)", "z", OpAllGather}: {16384, 4, 6, HiddenByCompute}, // embedding and head forward
		{name + " gradient", "z", OpReduceScatter}:     {16384, 4, 3, HiddenByCompute},
		{name + " gradient", "data", OpAllReduce}:      {4096, 4, 1, HiddenByLastBackward},
	} {
		c := got[k]
		if c.Elements != w.elements || c.Bytes != w.bytes || c.Calls != w.calls || c.Overlap != w.overlap {
			t.Errorf("%v: %+v, want %+v", k, c, w)
		}
	}
	for k := range got {
		if k.name == "lm_head weight (forward)" || k.name == "embed_tokens gradient" || k.name == name+" weight (backward)" {
			t.Errorf("tied model lists %v", k)
		}
	}
}

func TestCollectivesOneRank(t *testing.T) {
	cs, err := Collectives(smallConfig(t), Step{Grid: Grid{1, 1, 1, 1}, SeqLen: 8, MicroBatch: 1, MicroBatches: 4, Recompute: llama.RecomputeFull})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Errorf("one rank communicates: %+v", cs)
	}
	if _, err := Collectives(smallConfig(t), Step{Grid: Grid{1, 3, 1, 1}, SeqLen: 8, MicroBatch: 1, MicroBatches: 1}); err == nil {
		t.Error("X=3 on hidden 64 accepted")
	}
	if _, err := Collectives(smallConfig(t), Step{Grid: Grid{1, 1, 1, 1}, SeqLen: 8, MicroBatch: 0, MicroBatches: 1}); err == nil {
		t.Error("empty micro-batch accepted")
	}
}

// TestCollectivesScale checks the formulas' scaling on a real shape: the
// X traffic of a step does not depend on how it is cut into micro-batches,
// and Z traffic grows with their number.
func TestCollectivesScale(t *testing.T) {
	cfg := preset(t, "llama3.1-8b")
	sum := func(s Step) map[string]float64 {
		cs, err := Collectives(cfg, s)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{}
		for _, c := range cs {
			m[c.Group] += c.SentBytes()
		}
		return m
	}
	g := Grid{Data: 2, X: 4, Y: 2, Z: 4}
	one := sum(Step{Grid: g, SeqLen: 4096, MicroBatch: 4, MicroBatches: 1})
	four := sum(Step{Grid: g, SeqLen: 4096, MicroBatch: 1, MicroBatches: 4})
	for _, grp := range []string{GroupX, GroupY, GroupData, GroupDataZ} {
		if err := numtest.Scalar(four[grp], one[grp], numtest.Tol{Rel: 1e-9}); err != nil {
			t.Errorf("%s: bytes in four micro-batches against one: %v", grp, err)
		}
	}
	if err := numtest.Scalar(four[GroupZ]/one[GroupZ], 4, numtest.Tol{Abs: 1e-9}); err != nil {
		t.Errorf("z traffic with 4× the micro-batches, in one's: %v", err)
	}
}

// TestCollectivesBF16AndZeRO: in mixed precision the Z all-gathers move
// the weights' bf16 copies (2 bytes an element) and nothing else changes
// size; ZeRO (Zero 1) adds, over data, one all-gather a weight of its
// updated shard — every element of the rank's shards once (ShardParams),
// bf16 matrices in mixed precision, float32 norms — leaving the rest as
// without.
func TestCollectivesBF16AndZeRO(t *testing.T) {
	cfg := smallConfig(t)
	s := Step{Grid: Grid{Data: 2, X: 2, Y: 1, Z: 2}, SeqLen: 16, MicroBatch: 2, MicroBatches: 2}
	base := func(o Options) map[key]Collective {
		cs, err := CollectivesWith(cfg, s, o)
		if err != nil {
			t.Fatal(err)
		}
		return byKey(t, cs)
	}
	f32 := base(Options{})
	for _, o := range []Options{{Precision: engine.PrecisionBF16}, {Zero: 1}, {Precision: engine.PrecisionBF16, Zero: 1}} {
		got := base(o)
		var gathered int64
		for k, c := range got {
			ref, ok := f32[k]
			switch {
			case k.op == OpAllGather && k.group == GroupData:
				if ok || o.Zero == 0 || c.Calls == 0 {
					t.Errorf("%+v: %v: %+v", o, k, c)
				}
				gathered += c.Elements * int64(c.Calls)
				wantBytes := 4
				if o.Precision == engine.PrecisionBF16 && !strings.Contains(k.name, "norm") {
					wantBytes = 2
				}
				if c.Bytes != wantBytes {
					t.Errorf("%+v: %v: %d bytes an element, want %d", o, k, c.Bytes, wantBytes)
				}
			case !ok:
				t.Errorf("%+v: unexpected %v", o, k)
			case k.op == OpAllGather && k.group == GroupZ && o.Precision == engine.PrecisionBF16:
				if c.Bytes != 2 || ref.Bytes != 4 {
					t.Errorf("%+v: %v: %d bytes an element (float32 %d), want 2", o, k, c.Bytes, ref.Bytes)
				}
			default:
				if c != ref {
					t.Errorf("%+v: %v: %+v, want %+v", o, k, c, ref)
				}
			}
		}
		if o.Zero == 1 && gathered != ShardParams(cfg, s.Grid) {
			t.Errorf("%+v: ZeRO gathers %d elements, the rank holds %d", o, gathered, ShardParams(cfg, s.Grid))
		}
	}
}
