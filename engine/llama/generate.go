package llama

import (
	"fmt"
	"slices"

	"github.com/memtrain/memtrain/engine"
)

// GenerateOptions control greedy decoding.
type GenerateOptions struct {
	MaxNewTokens int
	// StopIDs end a sequence: the first generated id in this set is kept
	// as the sequence's last token (as HF's generate keeps EOS).
	StopIDs []int32
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
	sc                      *scratch       // the grid's, for rows tokens (nil on one rank)
	ce                      *ceScratch     // the grid's argmax over Y ranks' vocabulary slices, and Argmax's output
	all                     []*engine.Tensor
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
	p = append(p, scratchPlan(d, rows)...)
	if ce := cePlan(d, B); ce != nil {
		p = append(p, ce...)
	} else {
		add("argmax", engine.I32, B) // Argmax's output, which the grid's scratch holds otherwise
	}
	return p
}

func (m *Model) newDecoder(B, Tmax, rows int) *decoder {
	d := &decoder{m: m, B: B, Tmax: Tmax}
	ps := decoderPlan(m.d, B, Tmax, rows)
	for _, p := range ps {
		d.all = append(d.all, m.backend.Alloc(p.dtype, p.shape...))
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
	d.sc = newScratch(m.d, rows, next)
	if d.ce = newCEScratch(m.d, B, next); d.ce == nil {
		d.ce = &ceScratch{idx: next()}
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
	D, heads, kvHeads := m.d.D, m.d.heads, m.d.kvHeads

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
	ln, h, rstd := rowsOf(d.ln, R), rowsOf(d.h, R), d.rstd.View(0, R)
	q, att, k, v := rowsOf(d.q, R), rowsOf(d.att, R), rowsOf(d.k, R), rowsOf(d.v, R)
	gate, up, act := rowsOf(d.gate, R), rowsOf(d.up, R), rowsOf(d.act, R)
	kvRow := kvHeads * D
	m.beginPass(m.units.forward(false)[:1+len(m.Layers)])
	m.embed(x, m.nextWeights(m.units.embed)[0], idsT, d.sc)
	for l, p := range m.Layers {
		w := blockOf(m.nextWeights(m.units.layers[l]))
		m.rmsnorm(ln, rstd, x, p.AttnNorm, d.sc)
		m.linear(q, ln, w.q, m.gx)
		m.linear(k, ln, w.k, m.gx)
		m.linear(v, ln, w.v, m.gx)
		b.RoPE(q.Reshape(R, heads, D), posT, m.invFreq)
		b.RoPE(k.Reshape(R, kvHeads, D), posT, m.invFreq)
		// Append this step's keys and values to each sequence's cache.
		kc := d.kCache[l].View(s0*d.Tmax*kvRow, S, d.Tmax, kvHeads, D)
		vc := d.vCache[l].View(s0*d.Tmax*kvRow, S, d.Tmax, kvHeads, D)
		for s := 0; s < S; s++ {
			off := (s*d.Tmax + int(start[s])) * kvRow
			b.Copy(kc.View(off, n, kvRow), k.View(s*n*kvRow, n, kvRow))
			b.Copy(vc.View(off, n, kvRow), v.View(s*n*kvRow, n, kvRow))
		}
		b.AttentionKV(att.Reshape(S, n, heads, D), q.Reshape(S, n, heads, D), kc, vc, startT)
		m.linearResidual(h, att, w.o, x, m.gy)
		m.rmsnorm(ln, rstd, h, p.MLPNorm, d.sc)
		m.linear(gate, ln, w.gate, m.gx)
		m.linear(up, ln, w.up, m.gx)
		b.SwiGLU(act, gate, up)
		m.linearResidual(y, act, w.down, h, m.gy)
		x, y = y, x
	}
	for s := 0; s < S; s++ {
		b.Copy(d.last.Row(s0+s), x.Row(s*n+n-1))
	}
}

// predict turns d.last into the greedy next token of every sequence.
func (d *decoder) predict() []int32 {
	m := d.m
	m.beginPass([][]*engine.Param{m.units.head})
	m.rmsnorm(d.lastNorm, d.lastRms, d.last, m.Norm, d.sc)
	m.linear(d.logits, d.lastNorm, m.nextWeights(m.units.head)[0], m.gx)
	out := make([]int32, d.B)
	m.argmax(out, d.logits, d.ce)
	return out
}

// Generate continues each prompt greedily (the most likely token, the
// lowest id on ties) with a KV cache, the prompts batched whatever their
// lengths. It returns only the new tokens of each prompt.
//
// On a grid every rank calls it with the same prompts and gets the same
// continuations.
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
	if longest+opt.MaxNewTokens > cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("llama: prompt of %d tokens plus %d new exceeds max_position_embeddings %d", longest, opt.MaxNewTokens, cfg.MaxPositionEmbeddings)
	}
	B := len(prompts)
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
	next := d.predict()
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
		next = d.predict()
	}
}
