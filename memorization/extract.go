package memorization

import (
	"fmt"

	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/units"
)

// Result is one probe's outcome.
type Result struct {
	Doc         int     `json:"doc"`
	K           int     `json:"prefix_len"`
	Answer      int     `json:"answer,omitempty"` // the chat protocol's assistant answer, from 1 (Probe.Answer)
	Pred        []int32 `json:"pred"`             // the greedy continuation (an early stop id ends it)
	Suffix      []int32 `json:"suffix"`           // the true continuation
	Exact       bool    `json:"exact"`
	TokenMatch  float64 `json:"token_match"`
	PrefixMatch int     `json:"prefix_match"`
	RougeLIDs   float64 `json:"rougeL_tokens"`          // F1 over token ids
	RougeLText  float64 `json:"rougeL_words,omitempty"` // F1 over decoded words, when a decoder is given
	// Samples sampled continuations were decoded (Sampling), SampleHits of
	// which reproduce the suffix exactly.
	Samples    int `json:"samples,omitempty"`
	SampleHits int `json:"sample_hits,omitempty"`
}

// ExtractionProb is the probe's extraction probability: the fraction of
// its sampled continuations that reproduce the suffix exactly (0 without
// samples).
func (r *Result) ExtractionProb() float64 {
	if r.Samples == 0 {
		return 0
	}
	return float64(r.SampleHits) / float64(r.Samples)
}

// MaxSamples bounds SampleConfig.Samples, the sampled continuations a
// probe: each is a decoding of the probe's suffix.
const MaxSamples = 100_000

// SampleConfig is probabilistic extraction: Samples continuations of every
// probe drawn at Temperature from the TopK most likely tokens (0: all),
// seeded. A probe's samples depend on Seed, the probe (its document id,
// prefix length and prefix) and the sample's index alone: not on the
// batch, the other probes or the grid.
type SampleConfig struct {
	Samples     int     `json:"samples"`
	Temperature float64 `json:"temperature"`
	TopK        int     `json:"top_k"`
	Seed        uint64  `json:"seed"`
}

// Check refuses a negative sample count, and, with samples, a temperature
// that is not above 0 or a negative top-k.
func (c SampleConfig) Check() error {
	if c.Samples < 0 {
		return fmt.Errorf("samples %d: want 0 (greedy only) or more", c.Samples)
	}
	if c.Samples > MaxSamples {
		return fmt.Errorf("samples %d: want 0 (greedy only) to %d", c.Samples, MaxSamples)
	}
	if c.Samples == 0 {
		return nil
	}
	return (&llama.Sampling{Temperature: c.Temperature, TopK: c.TopK}).Check()
}

// sampleSeed is the seed of sample n of probe p: a mix (SplitMix64's
// finaliser) of the configuration's seed, the probe's document id, prefix
// length and prefix tokens, and n.
func sampleSeed(seed uint64, p Probe, n int) uint64 {
	mix := func(h, v uint64) uint64 {
		h ^= v + 0x9e3779b97f4a7c15 + h<<6 + h>>2
		h ^= h >> 30
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 27
		h *= 0x94d049bb133111eb
		return h ^ h>>31
	}
	h := mix(seed, uint64(int64(p.Doc)))
	h = mix(h, uint64(p.K))
	for _, id := range p.Prefix {
		h = mix(h, uint64(uint32(id)))
	}
	return mix(h, uint64(n))
}

// ExtractOptions control Extract.
type ExtractOptions struct {
	Batch   int                  // probes decoded together (default 8)
	StopIDs []int32              // an early stop (EOS) ends a continuation
	Decode  func([]int32) string // turns ids into text for word-level ROUGE-L; nil skips it
	// Sampling, with Samples > 0, adds probabilistic extraction beside the
	// greedy: each probe's sampled continuations, decoded Batch at a time.
	Sampling SampleConfig
}

// Extract decodes every probe greedily for as many tokens as its suffix
// and scores the continuation against the suffix; with opt.Sampling it
// also counts the sampled continuations that reproduce the suffix.
func Extract(m *llama.Model, probes []Probe, opt ExtractOptions) ([]Result, error) {
	if opt.Batch <= 0 {
		opt.Batch = 8
	}
	if err := opt.Sampling.Check(); err != nil {
		return nil, fmt.Errorf("memorization: %w", err)
	}
	out := make([]Result, 0, len(probes))
	for i := 0; i < len(probes); {
		// A batch shares one continuation length.
		j := i + 1
		for j < len(probes) && j-i < opt.Batch && len(probes[j].Suffix) == len(probes[i].Suffix) {
			j++
		}
		prompts := make([][]int32, j-i)
		for k := range prompts {
			prompts[k] = probes[i+k].Prefix
		}
		gen, err := m.Generate(prompts, llama.GenerateOptions{MaxNewTokens: len(probes[i].Suffix), StopIDs: opt.StopIDs})
		if err != nil {
			return nil, fmt.Errorf("memorization: document %d: %w", probes[i].Doc, err)
		}
		for k, pred := range gen {
			p := probes[i+k]
			r := Result{Doc: p.Doc, K: p.K, Answer: p.Answer, Pred: pred, Suffix: p.Suffix,
				Exact: ExactMatch(pred, p.Suffix), TokenMatch: TokenMatch(pred, p.Suffix), PrefixMatch: PrefixMatch(pred, p.Suffix)}
			_, _, r.RougeLIDs = RougeLIDs(pred, p.Suffix)
			if opt.Decode != nil {
				_, _, r.RougeLText = RougeLText(opt.Decode(pred), opt.Decode(p.Suffix))
			}
			out = append(out, r)
		}
		if opt.Sampling.Samples > 0 {
			if err := sampleExtract(m, probes[i:j], out[len(out)-(j-i):], opt); err != nil {
				return nil, err
			}
		}
		i = j
	}
	return out, nil
}

// sampleExtract decodes opt.Sampling.Samples sampled continuations of each
// probe (all of one suffix length), opt.Batch at a time, and counts in res
// those that reproduce the suffix.
func sampleExtract(m *llama.Model, probes []Probe, res []Result, opt ExtractOptions) error {
	sc := opt.Sampling
	for k := range probes {
		res[k].Samples, res[k].SampleHits = sc.Samples, 0
	}
	// Copy i is sample i mod Samples of probe i / Samples: the copies are
	// counted, never listed (len(probes) × Samples of them).
	total, ok := units.MulInt(int64(len(probes)), int64(sc.Samples))
	if !ok {
		return fmt.Errorf("memorization: %d probes × %d samples overflows", len(probes), sc.Samples)
	}
	for i := int64(0); i < total; i += int64(opt.Batch) {
		n := int(min(int64(opt.Batch), total-i))
		prompts := make([][]int32, n)
		seeds := make([]uint64, n)
		for c := range n {
			k, s := int((i+int64(c))/int64(sc.Samples)), int((i+int64(c))%int64(sc.Samples))
			prompts[c] = probes[k].Prefix
			seeds[c] = sampleSeed(sc.Seed, probes[k], s)
		}
		gen, err := m.Generate(prompts, llama.GenerateOptions{MaxNewTokens: len(probes[0].Suffix), StopIDs: opt.StopIDs,
			Sampling: &llama.Sampling{Temperature: sc.Temperature, TopK: sc.TopK, Seeds: seeds}})
		if err != nil {
			return fmt.Errorf("memorization: sampling document %d: %w", probes[int(i/int64(sc.Samples))].Doc, err)
		}
		for c := range n {
			k := int((i + int64(c)) / int64(sc.Samples))
			if ExactMatch(gen[c], probes[k].Suffix) {
				res[k].SampleHits++
			}
		}
	}
	return nil
}
