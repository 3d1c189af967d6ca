package memorization

import (
	"fmt"
	"math"
	"slices"

	"github.com/memtrain/memtrain/engine/llama"
)

// A Document is a text to evaluate, as token ids (BOS included where the
// protocol wants it), with whether the model was trained on it.
type Document struct {
	ID     int    // the document's id in its dataset or file
	Member bool   // trained on (a member) or held out (a non-member)
	Source string // the input file, for the per-document report
	Line   int64  // its line or row there
	IDs    []int32
	// Mask is a chat document's loss mask, a 0 or 1 per id: 1 for its
	// assistant answers' tokens (those it was trained on), 0 for the
	// prompt's. Nil for text; the chat protocol needs it.
	Mask []uint8
}

// MaxResamples bounds Bootstrap.Resamples: each interval keeps a value a
// resample (800 KB at the bound) and costs a pass over the documents a
// resample.
const MaxResamples = 100_000

// Bootstrap sets the confidence intervals of a summary.
type Bootstrap struct {
	Resamples int     // 1,000 by default
	Seed      uint64  // the intervals are deterministic for a seed
	Level     float64 // 0.95 by default
}

// EvalConfig controls Evaluate.
type EvalConfig struct {
	Protocol Protocol
	Batch    int                  // probes decoded together (default 8)
	StopIDs  []int32              // an early stop id (EOS) ends a continuation
	Decode   func([]int32) string // ids to text: word-level ROUGE-L and the zlib score; nil skips both
	// MinKPercent is k of the min-k% probability score (default 20).
	MinKPercent float64
	Bootstrap   Bootstrap
	// Strict makes a document too short for the protocol an error instead
	// of a skipped document.
	Strict bool
	// Sampling, with Samples > 0, adds probabilistic extraction (seeded
	// sampled continuations of every probe) beside the greedy.
	Sampling SampleConfig
	// Reference, if set, is a model with the same tokenizer (the base
	// model, say) whose loss on each document gives the reference-model
	// membership score (RefScore). On a grid it is split as the target is.
	Reference *llama.Model
	// Progress, if set, is called after each batch with the documents
	// scored and the probes decoded so far, and their totals.
	Progress func(scored, docs, decoded, probes int)
}

// EvalProgress is an evaluation's progress as one count, from
// EvalConfig.Progress's arguments: scoring is the first half (a document
// a unit), decoding the second (the probes scaled to the documents).
func EvalProgress(scored, docs, decoded, probes int) (done, total int) {
	return scored + decoded*docs/max(probes, 1), 2 * docs
}

// check refuses settings that defaults would otherwise take for "the
// default": negative counts, a min-k% outside (0, 100] or NaN.
func (c *EvalConfig) check() error {
	switch {
	case c.Batch < 0:
		return fmt.Errorf("memorization: batch %d: want 0 (8) or more", c.Batch)
	case c.Bootstrap.Resamples < 0:
		return fmt.Errorf("memorization: resamples %d: want 0 (1,000) or more", c.Bootstrap.Resamples)
	case c.Bootstrap.Resamples > MaxResamples:
		return fmt.Errorf("memorization: resamples %d: want 0 (1,000) to %d", c.Bootstrap.Resamples, MaxResamples)
	case c.MinKPercent != 0:
		if err := CheckMinKPercent(c.MinKPercent); err != nil {
			return fmt.Errorf("memorization: min_k_percent %w", err)
		}
	}
	if err := c.Sampling.Check(); err != nil {
		return fmt.Errorf("memorization: %w", err)
	}
	return nil
}

// CheckMinKPercent refuses a k of the min-k% score that is not a
// percentage in (0, 100] (NaN included). Its error begins with the value,
// for the caller to put its setting's name before: "150: want …".
func CheckMinKPercent(k float64) error {
	if !(k > 0 && k <= 100) {
		return fmt.Errorf("%v: want a percentage in (0, 100]", k)
	}
	return nil
}

func (c *EvalConfig) defaults() {
	if c.Batch <= 0 {
		c.Batch = 8
	}
	if c.MinKPercent <= 0 {
		c.MinKPercent = 20
	}
	if c.Bootstrap.Resamples <= 0 {
		c.Bootstrap.Resamples = 1000
	}
	if !(c.Bootstrap.Level > 0 && c.Bootstrap.Level < 1) {
		c.Bootstrap.Level = 0.95
	}
}

// DocResult is one document's outcome: a line of docs.jsonl.
type DocResult struct {
	Doc    int      `json:"doc"`
	Member bool     `json:"member"`
	Source string   `json:"source,omitempty"`
	Line   int64    `json:"line,omitempty"`
	Tokens int      `json:"tokens"`           // evaluated (after the protocol's truncation)
	Probes []Result `json:"probes,omitempty"` // none when the document is skipped
	// ShortAnswers (chat protocol) are the document's assistant answers
	// too short for a probe: of no more tokens than the answer prefix.
	ShortAnswers int `json:"short_answers,omitempty"`
	// Membership-inference scores over the whole evaluated document (with
	// the chat protocol, over its answers' tokens: the targets of its
	// training loss).
	Loss float64 `json:"loss"`           // mean negative log-likelihood per target, nats
	Zlib float64 `json:"zlib,omitempty"` // Loss / zlib length of the text (lower: member-like)
	MinK float64 `json:"min_k"`          // mean of the lowest k% token log-probabilities (higher: member-like)
	// RefLoss is the document's loss under the reference model, when the
	// evaluation had one (RefScore: Loss − RefLoss).
	RefLoss *float64 `json:"ref_loss,omitempty"`
	Skipped string   `json:"skipped,omitempty"`
}

// Interval is a mean with its bootstrap confidence interval.
type Interval struct {
	Mean float64 `json:"mean"`
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
}

func (iv Interval) String() string {
	return fmt.Sprintf("%.3f [%.3f, %.3f]", iv.Mean, iv.Lo, iv.Hi)
}

// Group is the aggregate of one set of documents (members or non-members)
// for one prefix length.
type Group struct {
	Documents    int      `json:"documents"`
	Exact        Interval `json:"exact_match"` // fraction of documents extracted verbatim
	TokenMatch   Interval `json:"token_match"`
	RougeLTokens Interval `json:"rougeL_tokens"`
	RougeLWords  Interval `json:"rougeL_words"`
	PrefixMatch  Interval `json:"prefix_match"` // tokens
	// Loss is the mean per-document loss (the utility cost on non-members),
	// and Perplexity exp(Loss.Mean).
	Loss       Interval `json:"loss"`
	Perplexity float64  `json:"perplexity"`
	// Sampled is probabilistic extraction, when the evaluation sampled.
	Sampled *SampledGroup `json:"sampled,omitempty"`
}

// SampledGroup is a group's probabilistic extraction: the fraction of
// documents extracted by at least one sampled continuation, and the mean
// per-document extraction probability (the fraction of its samples that
// reproduce the suffix).
type SampledGroup struct {
	Extracted   Interval `json:"extracted"`
	Probability Interval `json:"extraction_prob"`
}

// PrefixSummary aggregates the probes of one prefix length (the goldfish
// protocol has one, with K = 0: the prefix is the rest of each document).
type PrefixSummary struct {
	K          int   `json:"prefix_len"`
	Members    Group `json:"members"`
	NonMembers Group `json:"non_members"`
}

// MIA is the membership inference of a summary: for each score, the ROC
// AUC with which it separates members from non-members (0.5 is chance; 0
// when a set is empty) and the true-positive rate at 1% and 0.1%
// false-positive rate ([TPRAtFPR]: exact, from the empirical ROC; ties are
// never split). The reference-model score (Ref) is a document's loss
// minus its loss under a reference model (lower: member-like), present when
// the evaluation had one.
type MIA struct {
	LossAUC     float64 `json:"loss_auc"`
	LossTPR1    float64 `json:"loss_tpr_at_1pct_fpr"`
	LossTPR01   float64 `json:"loss_tpr_at_0.1pct_fpr"`
	ZlibAUC     float64 `json:"zlib_auc,omitempty"`
	ZlibTPR1    float64 `json:"zlib_tpr_at_1pct_fpr,omitempty"`
	ZlibTPR01   float64 `json:"zlib_tpr_at_0.1pct_fpr,omitempty"`
	MinKAUC     float64 `json:"min_k_auc"`
	MinKTPR1    float64 `json:"min_k_tpr_at_1pct_fpr"`
	MinKTPR01   float64 `json:"min_k_tpr_at_0.1pct_fpr"`
	MinKPercent float64 `json:"min_k_percent"`
	// Reference says the reference-model score was measured.
	Reference bool    `json:"reference,omitempty"`
	RefAUC    float64 `json:"ref_auc,omitempty"`
	RefTPR1   float64 `json:"ref_tpr_at_1pct_fpr,omitempty"`
	RefTPR01  float64 `json:"ref_tpr_at_0.1pct_fpr,omitempty"`
}

// The false-positive rates at which MIA reports true-positive rates.
const (
	FPR1  = 0.01
	FPR01 = 0.001
)

// attack returns a score's AUC and its TPRs at FPR1 and FPR01.
func attack(mem, non []float64, higherIsMember bool) (auc, tpr1, tpr01 float64) {
	return ROCAUC(mem, non, higherIsMember), TPRAtFPR(mem, non, higherIsMember, FPR1), TPRAtFPR(mem, non, higherIsMember, FPR01)
}

// RefScore is the reference-model membership score of a document: its loss
// under the target model minus its loss under the reference model, in nats
// per token. Lower means member-like: the target finds the document easier
// than a model that never saw it does, beyond how easy the text is.
func RefScore(loss, refLoss float64) float64 { return loss - refLoss }

// Summary is an evaluation's aggregate: summary.json.
type Summary struct {
	Schema     int             `json:"schema"` // 1
	Protocol   string          `json:"protocol"`
	Name       string          `json:"protocol_name"`
	SuffixLen  int             `json:"suffix_len"`
	Documents  int             `json:"documents"`
	Members    int             `json:"members"`
	NonMembers int             `json:"non_members"`
	Skipped    int             `json:"skipped"` // too short for the protocol
	Prefixes   []PrefixSummary `json:"prefixes"`
	MIA        MIA             `json:"membership_inference"`
	Bootstrap  Bootstrap       `json:"bootstrap"`
	// Sampling is the probabilistic extraction's settings, when it ran.
	Sampling *SampleConfig `json:"sampling,omitempty"`
	// SkippedAnswers (chat protocol) are the assistant answers too short
	// for a probe, in all documents.
	SkippedAnswers int `json:"skipped_answers,omitempty"`
}

// Prefix returns the summary of prefix length k, or nil.
func (s *Summary) Prefix(k int) *PrefixSummary {
	for i := range s.Prefixes {
		if s.Prefixes[i].K == k {
			return &s.Prefixes[i]
		}
	}
	return nil
}

// SummarySchema is the version of Summary and DocResult.
const SummarySchema = 1

// Evaluate measures extraction and membership inference on docs: every
// probe of the protocol is decoded greedily and scored, every document's
// per-token losses give its loss, zlib and min-k% scores, and the results
// are aggregated for members and non-members with bootstrap intervals.
// Documents are truncated to the model's context; those too short for the
// protocol are skipped and counted (an error with Strict).
func Evaluate(m *llama.Model, docs []Document, cfg EvalConfig) (*Summary, []DocResult, error) {
	if err := cfg.check(); err != nil {
		return nil, nil, err
	}
	cfg.defaults()
	p := cfg.Protocol
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	maxPos := m.Config.MaxPositionEmbeddings
	if p.MaxTokens == 0 || p.MaxTokens > maxPos {
		p.MaxTokens = maxPos
	}
	if r := cfg.Reference; r != nil {
		if r.Config.VocabSize != m.Config.VocabSize {
			return nil, nil, fmt.Errorf("memorization: the reference model's vocabulary has %d tokens, the model's %d: want the same tokenizer", r.Config.VocabSize, m.Config.VocabSize)
		}
		if r.Config.MaxPositionEmbeddings < p.MaxTokens {
			return nil, nil, fmt.Errorf("memorization: the reference model's context of %d tokens is shorter than the %d evaluated", r.Config.MaxPositionEmbeddings, p.MaxTokens)
		}
	}
	if err := checkMasks(docs, p); err != nil {
		return nil, nil, err
	}
	results, probes, owner, skipped := probeDocuments(docs, p, maxPos)
	if skipped > 0 && cfg.Strict {
		return nil, nil, fmt.Errorf("memorization: %d of %d documents are too short for %s (strict)", skipped, len(docs), p)
	}
	if short := shortAnswers(results); short > 0 && cfg.Strict {
		return nil, nil, fmt.Errorf("memorization: %d of %d answers are too short for %s (strict)", short, short+len(probes), p)
	}
	if len(probes) == 0 {
		return nil, nil, fmt.Errorf("memorization: no document has enough tokens for %s (%d documents)", p, len(docs))
	}

	// Membership-inference scores, a batch of documents at a time.
	scored := 0
	report := func(decoded int) {
		if cfg.Progress != nil {
			cfg.Progress(scored, len(docs), decoded, len(probes))
		}
	}
	if err := scoreDocs(m, docs, results, p, &cfg, func(done, total int) {
		scored = done * len(docs) / max(total, 1)
		report(0)
	}); err != nil {
		return nil, nil, err
	}
	if cfg.Reference != nil {
		if err := refLosses(cfg.Reference, docs, results, p, cfg.Batch); err != nil {
			return nil, nil, err
		}
	}
	scored = len(docs)

	opt := ExtractOptions{Batch: cfg.Batch, StopIDs: cfg.StopIDs, Decode: cfg.Decode, Sampling: cfg.Sampling}
	if err := extractProbes(m, probes, owner, results, opt, report); err != nil {
		return nil, nil, err
	}
	s := Summarize(results, p, cfg.MinKPercent, cfg.Bootstrap, cfg.Decode != nil)
	if cfg.Sampling.Samples > 0 {
		sc := cfg.Sampling
		s.Sampling = &sc
	}
	return s, results, nil
}

// checkMasks refuses, under the chat protocol, a document without its
// loss mask: the protocol cannot tell its answers.
func checkMasks(docs []Document, p Protocol) error {
	if p.Name != "chat" {
		return nil
	}
	for _, d := range docs {
		if len(d.Mask) != len(d.IDs) {
			return fmt.Errorf("memorization: %s: document %d has no loss mask (want a chat dataset's conversations, memtrain data prepare --chat)", p, d.ID)
		}
	}
	return nil
}

// shortAnswers is the number of the chat protocol's answers too short for
// a probe.
func shortAnswers(results []DocResult) int {
	n := 0
	for _, r := range results {
		n += r.ShortAnswers
	}
	return n
}

// probeDocuments cuts each document, truncated to p.MaxTokens, into the
// protocol's probes (those that fit in maxPos positions): a DocResult a
// document, the probes, the index in results of each probe's document,
// and the documents skipped as too short.
func probeDocuments(docs []Document, p Protocol, maxPos int) (results []DocResult, probes []Probe, owner []int, skipped int) {
	results = make([]DocResult, len(docs))
	for i, d := range docs {
		ids := d.IDs
		if len(ids) > p.MaxTokens {
			ids = ids[:p.MaxTokens]
		}
		r := &results[i]
		*r = DocResult{Doc: d.ID, Member: d.Member, Source: d.Source, Line: d.Line, Tokens: len(ids)}
		var ps []Probe
		if p.Name == "chat" {
			ps, r.ShortAnswers = p.ChatProbes(d.ID, ids, d.Mask[:min(len(d.Mask), len(ids))])
		} else {
			ps = p.Probes(d.ID, ids)
		}
		if len(ps) == 0 {
			r.Skipped = fmt.Sprintf("%d tokens, too short for %s", len(ids), p)
			if p.Name == "chat" {
				r.Skipped = fmt.Sprintf("%d tokens, no answer of more than %d tokens (%d answers) for %s", len(ids), p.PrefixLens[0], r.ShortAnswers, p)
			}
			skipped++
			continue
		}
		for _, pr := range ps {
			if len(pr.Prefix)+len(pr.Suffix) > maxPos {
				continue
			}
			probes = append(probes, pr)
			owner = append(owner, i)
		}
	}
	return results, probes, owner, skipped
}

// extractProbes decodes every probe (Extract, opt.Batch at a time) into
// its document's results, probes of equal suffix length and similar
// prefix length together, so that batches share one decode length and
// little padding; each document's probes end sorted by prefix length.
// report, if set, sees the probes decoded so far.
func extractProbes(m *llama.Model, probes []Probe, owner []int, results []DocResult, opt ExtractOptions, report func(decoded int)) error {
	if opt.Batch <= 0 {
		opt.Batch = 8
	}
	order := make([]int, len(probes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if d := len(probes[a].Suffix) - len(probes[b].Suffix); d != 0 {
			return d
		}
		return len(probes[a].Prefix) - len(probes[b].Prefix)
	})
	for i := 0; i < len(order); i += opt.Batch {
		j := min(i+opt.Batch, len(order))
		batch := make([]Probe, j-i)
		for k, o := range order[i:j] {
			batch[k] = probes[o]
		}
		res, err := Extract(m, batch, opt)
		if err != nil {
			return err
		}
		for k, o := range order[i:j] {
			r := &results[owner[o]]
			r.Probes = append(r.Probes, res[k])
		}
		if report != nil {
			report(j)
		}
	}
	for i := range results {
		slices.SortFunc(results[i].Probes, func(a, b Result) int { return a.K - b.K })
	}
	return nil
}

// scoredTargets returns the position losses of a document that its
// membership scores average, and the ids they predict: every target
// (losses[t] is that of ids[t+1]), or under the chat protocol (answers)
// those whose token its loss mask keeps, the targets it was trained on.
func scoredTargets(d Document, losses []float32, answers bool) ([]float32, []int32) {
	n := len(losses)
	if !answers || d.Mask == nil {
		return losses, d.IDs[1 : n+1]
	}
	var ls []float32
	var ids []int32
	for t, l := range losses {
		if d.Mask[t+1] != 0 {
			ls = append(ls, l)
			ids = append(ids, d.IDs[t+1])
		}
	}
	return ls, ids
}

// scoreDocs fills the loss, zlib and min-k% scores of the documents
// from their position losses (llama.Model.Score), each truncated to
// p.MaxTokens; under the chat protocol over their answers' tokens.
func scoreDocs(m *llama.Model, docs []Document, out []DocResult, p Protocol, cfg *EvalConfig, progress func(done, total int)) error {
	maxTokens := p.MaxTokens
	seqs := make([][]int32, len(docs))
	for b, d := range docs {
		seqs[b] = d.IDs[:min(len(d.IDs), maxTokens)]
	}
	// One window a document: a truncated document has at most
	// maxTokens-1 targets. Single-token documents have none; they are
	// skipped.
	sc, err := m.Score(llama.NewWindows(seqs, max(1, maxTokens-1)), llama.ScoreOptions{Docs: max(1, len(docs)), Batch: cfg.Batch, PerToken: true, Progress: progress})
	if err != nil {
		return fmt.Errorf("memorization: scoring documents: %w", err)
	}
	for b, d := range docs {
		if len(sc.Tokens[b]) < 1 {
			continue
		}
		losses, targets := scoredTargets(d, sc.Tokens[b], p.Name == "chat")
		n := len(losses)
		if n < 1 {
			continue
		}
		r := &out[b]
		logp := make([]float64, n)
		sum := 0.0
		for t, l := range losses {
			sum += float64(l)
			logp[t] = -float64(l)
		}
		r.Loss = sum / float64(n)
		r.MinK = MinKProb(logp, cfg.MinKPercent)
		if cfg.Decode != nil {
			text := d.IDs[:n+1] // BOS, which decoding skips, and the targets
			if p.Name == "chat" {
				text = targets
			}
			r.Zlib = ZlibRatio(r.Loss, cfg.Decode(text))
		}
	}
	return nil
}

// refLosses sets the reference model's loss of every scored document,
// over the same targets as its loss.
func refLosses(ref *llama.Model, docs []Document, out []DocResult, p Protocol, batch int) error {
	maxTokens := p.MaxTokens
	seqs := make([][]int32, len(docs))
	for b, d := range docs {
		seqs[b] = d.IDs[:min(len(d.IDs), maxTokens)]
	}
	sc, err := ref.Score(llama.NewWindows(seqs, max(1, maxTokens-1)), llama.ScoreOptions{Docs: max(1, len(docs)), Batch: batch, PerToken: true})
	if err != nil {
		return fmt.Errorf("memorization: scoring documents with the reference model: %w", err)
	}
	for b, d := range docs {
		losses, _ := scoredTargets(d, sc.Tokens[b], p.Name == "chat")
		if len(losses) < 1 {
			continue
		}
		sum := 0.0
		for _, l := range losses {
			sum += float64(l)
		}
		v := sum / float64(len(losses))
		out[b].RefLoss = &v
	}
	return nil
}

// Summarize aggregates per-document results: per prefix length, members
// and non-members side by side, each mean with a bootstrap interval, and
// the membership-inference AUCs. words says whether word-level ROUGE-L and
// zlib scores were computed.
func Summarize(results []DocResult, p Protocol, minKPercent float64, bs Bootstrap, words bool) *Summary {
	s := &Summary{Schema: SummarySchema, Protocol: p.String(), Name: p.Name, SuffixLen: p.SuffixLen,
		Documents: len(results), Bootstrap: bs}
	var ks []int
	seen := map[int]bool{}
	var memLoss, nonLoss, memZ, nonZ, memK, nonK, memR, nonR []float64
	ref := true // every scored document has a reference loss
	for _, r := range results {
		if r.Member {
			s.Members++
		} else {
			s.NonMembers++
		}
		s.SkippedAnswers += r.ShortAnswers
		if r.Skipped != "" {
			s.Skipped++
			continue
		}
		for _, pr := range r.Probes {
			k := prefixKey(p, pr.K)
			if !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
		if r.RefLoss == nil {
			ref = false
		}
		if r.Member {
			memLoss, memZ, memK = append(memLoss, r.Loss), append(memZ, r.Zlib), append(memK, r.MinK)
			if ref {
				memR = append(memR, RefScore(r.Loss, *r.RefLoss))
			}
		} else {
			nonLoss, nonZ, nonK = append(nonLoss, r.Loss), append(nonZ, r.Zlib), append(nonK, r.MinK)
			if ref {
				nonR = append(nonR, RefScore(r.Loss, *r.RefLoss))
			}
		}
	}
	slices.Sort(ks)
	for _, k := range ks {
		ps := PrefixSummary{K: k}
		ps.Members = group(results, p, k, true, bs)
		ps.NonMembers = group(results, p, k, false, bs)
		s.Prefixes = append(s.Prefixes, ps)
	}
	s.MIA = MIA{MinKPercent: minKPercent}
	if len(memLoss) > 0 && len(nonLoss) > 0 {
		s.MIA.LossAUC, s.MIA.LossTPR1, s.MIA.LossTPR01 = attack(memLoss, nonLoss, false)
		s.MIA.MinKAUC, s.MIA.MinKTPR1, s.MIA.MinKTPR01 = attack(memK, nonK, true)
		if words {
			s.MIA.ZlibAUC, s.MIA.ZlibTPR1, s.MIA.ZlibTPR01 = attack(memZ, nonZ, false)
		}
		if ref {
			s.MIA.Reference = true
			s.MIA.RefAUC, s.MIA.RefTPR1, s.MIA.RefTPR01 = attack(memR, nonR, false)
		}
	}
	return s
}

// prefixKey groups probes: by prefix length, except for the goldfish
// protocol whose prefix is the rest of each document (key 0) and the chat
// protocol whose prefix is the conversation up to an answer and the
// answer's first P tokens (key P).
func prefixKey(p Protocol, k int) int {
	switch p.Name {
	case "goldfish":
		return 0
	case "chat":
		return p.PrefixLens[0]
	}
	return k
}

// group aggregates the probes of prefix key k of the members (or
// non-members).
func group(results []DocResult, p Protocol, k int, member bool, bs Bootstrap) Group {
	var exact, tok, rt, rw, pm, loss, hit, prob []float64
	sampled := false
	eachProbe(results, p, k, member, func(r *DocResult, pr *Result) {
		exact = append(exact, b2f(pr.Exact))
		tok = append(tok, pr.TokenMatch)
		rt = append(rt, pr.RougeLIDs)
		rw = append(rw, pr.RougeLText)
		pm = append(pm, float64(pr.PrefixMatch))
		loss = append(loss, r.Loss)
		if pr.Samples > 0 {
			sampled = true
		}
		hit = append(hit, b2f(pr.SampleHits > 0))
		prob = append(prob, pr.ExtractionProb())
	})
	// Each metric gets its own stream of resamples from the same seed, so
	// that an interval does not depend on which other metrics exist.
	g := Group{Documents: len(exact),
		Exact:        interval(exact, bs, 1),
		TokenMatch:   interval(tok, bs, 2),
		RougeLTokens: interval(rt, bs, 3),
		RougeLWords:  interval(rw, bs, 4),
		PrefixMatch:  interval(pm, bs, 5),
		Loss:         interval(loss, bs, 6),
	}
	if len(loss) > 0 {
		g.Perplexity = math.Exp(g.Loss.Mean)
	}
	if sampled {
		g.Sampled = &SampledGroup{Extracted: interval(hit, bs, 7), Probability: interval(prob, bs, 8)}
	}
	return g
}

// eachProbe calls f for every probe of prefix key k of the scored members
// (or non-members), in document order.
func eachProbe(results []DocResult, p Protocol, k int, member bool, f func(*DocResult, *Result)) {
	for i := range results {
		r := &results[i]
		if r.Member != member || r.Skipped != "" {
			continue
		}
		for j := range r.Probes {
			if prefixKey(p, r.Probes[j].K) == k {
				f(r, &r.Probes[j])
			}
		}
	}
}

func interval(values []float64, bs Bootstrap, stream uint64) Interval {
	lo, hi := BootstrapCI(values, Mean, bs.Resamples, bs.Seed+stream*0x9e3779b97f4a7c15, bs.Level)
	return Interval{Mean: Mean(values), Lo: lo, Hi: hi}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
