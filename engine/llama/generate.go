package llama

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/memtrain/memtrain/engine"
)

// GenerateOptions control decoding: greedy, or sampled with Sampling.
type GenerateOptions struct {
	MaxNewTokens int
	// StopIDs end a sequence: the first generated id in this set is kept
	// as the sequence's last token (as HF's generate keeps EOS).
	StopIDs []int32
	// Sampling, if set, draws each new token at random instead of taking
	// the most likely.
	Sampling *Sampling
}

// Sampling draws each new token from the softmax of the logits divided by
// Temperature, restricted to the TopK most likely tokens (0: the whole
// vocabulary; ties at the k-th place go to the lower ids, so TopK 1 is
// greedy decoding). Each prompt has its own random stream, a PCG seeded
// from its seed, drawing one number a new token: a continuation depends on
// its prompt and seed alone, not on the other prompts of the batch. As the
// temperature goes to 0 sampling becomes greedy decoding.
type Sampling struct {
	Temperature float64  // > 0
	TopK        int      // ≥ 0
	Seeds       []uint64 // one a prompt
}

// Check refuses a temperature that is not a positive number and a negative
// top-k.
func (s *Sampling) Check() error {
	switch {
	case !(s.Temperature > 0) || math.IsInf(s.Temperature, 1):
		return fmt.Errorf("temperature %v: want a number above 0", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("top-k %d: want 0 (the whole vocabulary) or more", s.TopK)
	}
	return nil
}

// decoder is the state of one batched greedy decoding: the KV cache of
// every layer and the scratch activations of a step of up to rows tokens.
type decoder struct {
	m      *Model
	B      int
	Tmax   int
	kCache []*engine.Tensor // per layer [B,Tmax,kvHeads,D]
	vCache []*engine.Tensor

	x, y, ln, h             *engine.Tensor // [rows,H]
	rstd                    *engine.Tensor // [rows]
	q, att                  *engine.Tensor // [rows,Q]
	k, v                    *engine.Tensor // [rows,KV]
	gate, up, act           *engine.Tensor // [rows,I]
	ids, pos                *engine.Tensor // I32 [rows]
	start                   *engine.Tensor // I32 [B]
	last, lastNorm, lastRms *engine.Tensor // [B,H], [B,H], [B]
	logits                  *engine.Tensor // [B,V]
	logitsAll               *engine.Tensor // [Y·B·V]: every Y rank's slice of the logits (nil on Y = 1)
	sc                      *scratch       // the grid's, for rows tokens (nil when X and Y are 1)
	ce                      *ceScratch     // the grid's argmax over Y ranks' vocabulary slices, and Argmax's output
	z                       *engine.Tensor // [rows, r]: an adapter's product (nil without adapters)
	// With head norms (Qwen3): the q and k projections' outputs and each
	// head's 1/rms; nil otherwise.
	qraw, kraw   *engine.Tensor // [rows,Q], [rows,KV]
	rstdq, rstdk *engine.Tensor // [rows·heads], [rows·kvHeads]
	all          []*engine.Tensor
}

// decoderPlan lists a decoder's tensors for B sequences of up to Tmax
// positions and steps of up to rows tokens, in the order newDecoder
// takes them: the single source of its allocation and of its memory
// accounting (Memory), as plan is for the workspace.
func decoderPlan(d dims, B, Tmax, rows int) []tensorPlan {
	H, Q, KV, I, V := d.H, d.Q, d.KV, d.I, d.V
	var p []tensorPlan
	add := func(name string, dt engine.DType, shape ...int) {
		p = append(p, tensorPlan{name, dt, shape})
	}
	for range d.L {
		add("k_cache", engine.F32, B, Tmax, d.kvHeads, d.D)
		add("v_cache", engine.F32, B, Tmax, d.kvHeads, d.D)
	}
	for _, n := range []string{"x", "y", "ln", "h"} {
		add(n, engine.F32, rows, H)
	}
	add("rstd", engine.F32, rows)
	add("q", engine.F32, rows, Q)
	add("att", engine.F32, rows, Q)
	add("k", engine.F32, rows, KV)
	add("v", engine.F32, rows, KV)
	for _, n := range []string{"gate", "up", "act"} {
		add(n, engine.F32, rows, I)
	}
	add("ids", engine.I32, rows)
	add("pos", engine.I32, rows)
	add("start", engine.I32, B)
	add("last", engine.F32, B, H)
	add("last_norm", engine.F32, B, H)
	add("last_rms", engine.F32, B)
	add("logits", engine.F32, B, V)
	if d.y > 1 {
		add("logits_all", engine.F32, d.y*B*V) // sampling gathers the vocabulary slices
	}
	p = append(p, scratchPlan(d, rows)...)
	if ce := cePlan(d, B); ce != nil {
		p = append(p, ce...)
	} else {
		add("argmax", engine.I32, B) // Argmax's output, which the grid's scratch holds otherwise
	}
	if d.lora != nil {
		add("lora_z", engine.F32, rows, d.lora.R) // one projection's adapter product at a time
	}
	if d.qkNorm {
		add("qraw", engine.F32, rows, Q)
		add("kraw", engine.F32, rows, KV)
		add("rstdq", engine.F32, rows*d.heads)
		add("rstdk", engine.F32, rows*d.kvHeads)
	}
	return p
}

func (m *Model) newDecoder(B, Tmax, rows int) *decoder {
	d := &decoder{m: m, B: B, Tmax: Tmax}
	ps := decoderPlan(m.d, B, Tmax, rows)
	for _, p := range ps {
		d.all = append(d.all, p.alloc(m.backend))
	}
	rest := d.all
	next := func() *engine.Tensor {
		t := rest[0]
		rest = rest[1:]
		return t
	}
	for range m.Layers {
		d.kCache = append(d.kCache, next())
		d.vCache = append(d.vCache, next())
	}
	d.x, d.y, d.ln, d.h = next(), next(), next(), next()
	d.rstd = next()
	d.q, d.att = next(), next()
	d.k, d.v = next(), next()
	d.gate, d.up, d.act = next(), next(), next()
	d.ids, d.pos = next(), next()
	d.start = next()
	d.last, d.lastNorm, d.lastRms = next(), next(), next()
	d.logits = next()
	if m.d.y > 1 {
		d.logitsAll = next()
	}
	d.sc = newScratch(m.d, rows, next)
	if d.ce = newCEScratch(m.d, B, next); d.ce == nil {
		d.ce = &ceScratch{idx: next()}
	}
	if m.d.lora != nil {
		d.z = next()
	}
	if m.d.qkNorm {
		d.qraw, d.kraw, d.rstdq, d.rstdk = next(), next(), next(), next()
	}
	return d
}

func (d *decoder) free() {
	for _, t := range d.all {
		d.m.backend.Free(t)
	}
}

// rowsOf returns the first n rows of a [rows, w] scratch tensor.
func rowsOf(t *engine.Tensor, n int) *engine.Tensor { return t.View(0, n, t.Dim(1)) }

// step runs n new tokens of each of the sequences seqs (a contiguous range
// [s0, s0+len) of the batch) through the model: ids are the tokens, start
// each sequence's position of its first new token. The hidden state of
// each sequence's last new token is left in d.last rows s0….
func (d *decoder) step(s0 int, ids []int32, n int, start []int32) {
	m, b := d.m, d.m.backend
	S := len(start)
	R := S * n
	heads, kvHeads := m.d.heads, m.d.kvHeads

	pos := make([]int32, R)
	for s := 0; s < S; s++ {
		for i := 0; i < n; i++ {
			pos[s*n+i] = start[s] + int32(i)
		}
	}
	idsT, posT := d.ids.View(0, R), d.pos.View(0, R)
	b.UploadInt32(idsT, ids)
	b.UploadInt32(posT, pos)
	m.vocabSlice(d.sc, ids)
	startT := d.start.View(0, S)
	b.UploadInt32(startT, start)

	x, y := rowsOf(d.x, R), rowsOf(d.y, R)
	// The block's activations are the decoder's scratch: one norm output
	// and statistic serve both norms, and one adapter product every
	// projection, each dead before the next is made.
	ln, rstd := rowsOf(d.ln, R), d.rstd.View(0, R)
	a := &layerActs{
		ln1: ln, rstd1: rstd, ln2: ln, rstd2: rstd,
		q: rowsOf(d.q, R), k: rowsOf(d.k, R), v: rowsOf(d.v, R), att: rowsOf(d.att, R), h: rowsOf(d.h, R),
		gate: rowsOf(d.gate, R), up: rowsOf(d.up, R), act: rowsOf(d.act, R),
	}
	if d.qraw != nil {
		a.qraw, a.kraw = rowsOf(d.qraw, R), rowsOf(d.kraw, R)
		a.rstdq, a.rstdk = d.rstdq.View(0, R*heads), d.rstdk.View(0, R*kvHeads)
	}
	if d.z != nil {
		for p := range a.z {
			a.z[p] = rowsOf(d.z, R)
		}
	}
	kv := &kvStep{d: d, s0: s0, n: n, start: start, startT: startT}
	m.beginPass(m.units.forward(false)[:1+len(m.Layers)])
	m.embed(x, m.nextWeights(m.units.embed)[0], idsT, d.sc)
	for l := range m.Layers {
		w := blockOf(m.nextWeights(m.units.layers[l]))
		m.blockForward(l, w, a, x, y, posT, d.sc, nil, S, n, kv)
		x, y = y, x
	}
	for s := 0; s < S; s++ {
		b.Copy(d.last.Row(s0+s), x.Row(s*n+n-1))
	}
}

// kvStep is a decoding step's attention (blockForward's kv): the new
// tokens' keys and values appended to sequences s0…'s caches, then each
// new query against its sequence's cache.
type kvStep struct {
	d      *decoder
	s0, n  int
	start  []int32        // each sequence's position of its first new token
	startT *engine.Tensor // start on the device
}

// attend is layer l's attention of a decoding step, into a.att.
func (kv *kvStep) attend(l int, a *layerActs) {
	d, m := kv.d, kv.d.m
	b := m.backend
	S, n, D, heads, kvHeads := len(kv.start), kv.n, m.d.D, m.d.heads, m.d.kvHeads
	kvRow := kvHeads * D
	kc := d.kCache[l].View(kv.s0*d.Tmax*kvRow, S, d.Tmax, kvHeads, D)
	vc := d.vCache[l].View(kv.s0*d.Tmax*kvRow, S, d.Tmax, kvHeads, D)
	for s := 0; s < S; s++ {
		off := (s*d.Tmax + int(kv.start[s])) * kvRow
		b.Copy(kc.View(off, n, kvRow), a.k.View(s*n*kvRow, n, kvRow))
		b.Copy(vc.View(off, n, kvRow), a.v.View(s*n*kvRow, n, kvRow))
	}
	b.AttentionKV(a.att.Reshape(S, n, heads, D), a.q.Reshape(S, n, heads, D), kc, vc, kv.startT, m.window)
}

// predict turns d.last into the next token of every sequence: the greedy
// one, or with a sampler one drawn from each sequence's stream.
func (d *decoder) predict(smp *sampler) []int32 {
	m := d.m
	m.beginPass([][]*engine.Param{m.units.head})
	m.rmsnorm(d.lastNorm, d.lastRms, d.last, m.Norm, d.sc)
	m.linear(d.logits, d.lastNorm, m.nextWeights(m.units.head)[0], m.gx)
	out := make([]int32, d.B)
	if smp == nil {
		m.argmax(out, d.logits, d.ce)
		return out
	}
	logits := d.hostLogits(smp)
	V := d.m.Config.VocabSize
	for s := range out {
		out[s] = smp.draw(s, logits[s*V:(s+1)*V])
	}
	return out
}

// hostLogits downloads every sequence's logits over the whole vocabulary,
// [B·V]: on a grid the Y ranks' slices are gathered, so every rank holds
// the same.
func (d *decoder) hostLogits(smp *sampler) []float32 {
	b, V, B := d.m.backend, d.m.Config.VocabSize, d.B
	if len(smp.logits) != B*V {
		smp.logits = make([]float32, B*V)
	}
	if d.logitsAll == nil {
		b.Download(smp.logits, d.logits)
		return smp.logits
	}
	Vl, Y := d.m.d.V, d.m.d.y
	check(d.m.gy.AllGather(d.logitsAll, d.logits.Reshape(B*Vl)))
	if len(smp.gathered) != Y*B*Vl {
		smp.gathered = make([]float32, Y*B*Vl)
	}
	b.Download(smp.gathered, d.logitsAll)
	for y := 0; y < Y; y++ {
		for s := 0; s < B; s++ {
			copy(smp.logits[s*V+y*Vl:s*V+(y+1)*Vl], smp.gathered[(y*B+s)*Vl:(y*B+s+1)*Vl])
		}
	}
	return smp.logits
}

// sampler holds the random streams of a sampled decoding, one a sequence
// in the decoder's order, and host scratch.
type sampler struct {
	temperature float64
	topK        int
	rngs        []*rand.Rand
	logits      []float32
	gathered    []float32
	w           []float64
	top         topHeap
}

// draw picks sequence s's next token from its logits.
func (smp *sampler) draw(s int, logits []float32) int32 {
	return sampleToken(logits, smp.temperature, smp.topK, smp.rngs[s].Float64(), &smp.w, &smp.top)
}

// sampleToken draws a token from logits: from the softmax of
// logits/temperature over the topK most likely tokens (0: all; ties at the
// k-th place go to the lower ids), by inverting the cumulative
// distribution, in the order of the ids, at u ∈ [0, 1). w and top are
// scratch kept between calls (nil pointers allocate). A NaN logit is never
// drawn unless all are NaN (then the lowest id).
func sampleToken(logits []float32, temperature float64, topK int, u float64, w *[]float64, top *topHeap) int32 {
	var scratchW []float64
	if w == nil {
		w = &scratchW
	}
	var scratchTop topHeap
	if top == nil {
		top = &scratchTop
	}
	V := len(logits)
	ids := []int32(nil) // the candidates in id order; nil: every id
	if topK > 0 && topK < V {
		*top = (*top)[:0]
		for i, l := range logits {
			if l != l {
				continue
			}
			if len(*top) < topK {
				heap.Push(top, topEntry{l, int32(i)})
			} else if (*top)[0].less(topEntry{l, int32(i)}) {
				(*top)[0] = topEntry{l, int32(i)}
				heap.Fix(top, 0)
			}
		}
		ids = make([]int32, len(*top))
		for i, e := range *top {
			ids[i] = e.id
		}
		slices.Sort(ids)
	}
	n := V
	if ids != nil {
		n = len(ids)
	}
	id := func(i int) int32 {
		if ids == nil {
			return int32(i)
		}
		return ids[i]
	}
	best := math.Inf(-1)
	for i := 0; i < n; i++ {
		if l := float64(logits[id(i)]); l > best {
			best = l
		}
	}
	if math.IsInf(best, -1) || n == 0 {
		return 0
	}
	if cap(*w) < n {
		*w = make([]float64, n)
	}
	ws := (*w)[:n]
	sum := 0.0
	for i := range ws {
		l := float64(logits[id(i)])
		if l != l {
			ws[i] = 0
			continue
		}
		ws[i] = math.Exp((l - best) / temperature)
		sum += ws[i]
	}
	target := u * sum
	last := int32(0)
	for i, v := range ws {
		if v == 0 {
			continue
		}
		last = id(i)
		if target < v {
			return last
		}
		target -= v
	}
	return last // rounding left target past the end: the last candidate
}

// topEntry is a candidate of top-k; topHeap keeps the k most likely with
// the least likely (the lowest logit, the highest id on ties) on top.
type topEntry struct {
	l  float32
	id int32
}

// less says whether e ranks below f: a lower logit, or the same and a
// higher id.
func (e topEntry) less(f topEntry) bool { return e.l < f.l || (e.l == f.l && e.id > f.id) }

type topHeap []topEntry

func (h topHeap) Len() int           { return len(h) }
func (h topHeap) Less(i, j int) bool { return h[i].less(h[j]) }
func (h topHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *topHeap) Push(x any)        { *h = append(*h, x.(topEntry)) }
func (h *topHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Generate continues each prompt greedily (the most likely token, the
// lowest id on ties), or sampled with opt.Sampling, with a KV cache, the
// prompts batched whatever their lengths. It returns only the new tokens
// of each prompt.
//
// On a grid every rank calls it with the same prompts (and seeds) and gets
// the same continuations.
func (m *Model) Generate(prompts [][]int32, opt GenerateOptions) (out [][]int32, err error) {
	defer recoverComm(&err)
	cfg := m.Config
	if len(prompts) == 0 {
		return nil, fmt.Errorf("llama: no prompts")
	}
	if opt.MaxNewTokens < 0 {
		return nil, fmt.Errorf("llama: max new tokens %d is negative", opt.MaxNewTokens)
	}
	longest := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("llama: prompt %d is empty", i)
		}
		for _, id := range p {
			if id < 0 || int(id) >= cfg.VocabSize {
				return nil, fmt.Errorf("llama: prompt %d: token id %d outside the vocabulary [0, %d)", i, id, cfg.VocabSize)
			}
		}
		longest = max(longest, len(p))
	}
	if opt.MaxNewTokens > cfg.MaxPositionEmbeddings-longest { // longest+MaxNewTokens, which can overflow
		return nil, fmt.Errorf("llama: prompt of %d tokens plus %d new exceeds max_position_embeddings %d", longest, opt.MaxNewTokens, cfg.MaxPositionEmbeddings)
	}
	B := len(prompts)
	if sm := opt.Sampling; sm != nil {
		if err := sm.Check(); err != nil {
			return nil, fmt.Errorf("llama: %w", err)
		}
		if len(sm.Seeds) != B {
			return nil, fmt.Errorf("llama: %d sampling seeds for %d prompts", len(sm.Seeds), B)
		}
	}
	out = make([][]int32, B)
	if opt.MaxNewTokens == 0 {
		return out, nil
	}
	// Decode in order of prompt length so that prompts of equal length sit
	// side by side and are prefilled together, as one batch of GEMMs; the
	// outputs are put back in the caller's order at the end.
	order := make([]int, B)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(prompts[a]) - len(prompts[b]) })
	sorted := make([][]int32, B)
	total := 0
	for i, o := range order {
		sorted[i] = prompts[o]
		total += len(prompts[o])
	}
	prompts = sorted
	var smp *sampler
	if sm := opt.Sampling; sm != nil {
		smp = &sampler{temperature: sm.Temperature, topK: sm.TopK, rngs: make([]*rand.Rand, B)}
		for i, o := range order {
			smp.rngs[i] = rand.New(rand.NewPCG(sm.Seeds[o], 0x853c49e6748fea9b))
		}
	}
	defer func() {
		unsorted := make([][]int32, B)
		for i, o := range order {
			unsorted[o] = out[i]
		}
		copy(out, unsorted)
	}()
	d := m.newDecoder(B, longest+opt.MaxNewTokens, max(total, B))
	defer d.free()

	// Prefill: each run of prompts of one length as one batch.
	for s0 := 0; s0 < B; {
		s1 := s0
		var ids []int32
		for s1 < B && len(prompts[s1]) == len(prompts[s0]) {
			ids = append(ids, prompts[s1]...)
			s1++
		}
		d.step(s0, ids, len(prompts[s0]), make([]int32, s1-s0))
		s0 = s1
	}
	next := d.predict(smp)
	done := make([]bool, B)
	start := make([]int32, B)
	for s := range prompts {
		start[s] = int32(len(prompts[s]))
	}
	for step := 0; ; step++ {
		alive := false
		for s := range next {
			if done[s] {
				continue
			}
			out[s] = append(out[s], next[s])
			if slices.Contains(opt.StopIDs, next[s]) || len(out[s]) == opt.MaxNewTokens {
				done[s] = true
			} else {
				alive = true
			}
		}
		if !alive {
			return out, nil
		}
		// Finished sequences keep decoding (their outputs are dropped) so
		// that the batch stays one contiguous GEMM.
		d.step(0, next, 1, start)
		for s := range start {
			start[s]++
		}
		next = d.predict(smp)
	}
}
