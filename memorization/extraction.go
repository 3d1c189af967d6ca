package memorization

import (
	"slices"

	"fmt"

	"github.com/memtrain/memtrain/engine/llama"
)

// ExtractionConfig controls Extraction: greedy extraction alone, without
// membership scores or bootstrap intervals, as a run measures it while it
// trains.
type ExtractionConfig struct {
	Protocol Protocol
	Batch    int     // probes decoded together (default 8)
	StopIDs  []int32 // an early stop id (EOS) ends a continuation
}

// ExtractionGroup is the greedy extraction of one set of documents
// (members or non-members) for one prefix length: the fraction of probes
// reproduced exactly and the mean token match, as Group's Exact.Mean and
// TokenMatch.Mean are for the same documents.
type ExtractionGroup struct {
	Documents int     `json:"documents"`
	Exact     float64 `json:"exact"`
	Token     float64 `json:"token"`
}

// PrefixExtraction is the extraction of one prefix length (K = 0 for the
// goldfish protocol, as in PrefixSummary).
type PrefixExtraction struct {
	K          int              `json:"prefix_len"`
	Members    ExtractionGroup  `json:"members"`
	NonMembers *ExtractionGroup `json:"non_members,omitempty"`
}

// ExtractionSummary is greedy extraction of members and non-members, the
// "extraction" of a training run's metrics line. Members and NonMembers
// are those of the longest prefix length; Prefixes has every prefix
// length when the protocol has more than one. NonMembers is absent
// without non-member documents.
type ExtractionSummary struct {
	Protocol   string             `json:"protocol"` // Protocol.Key
	Members    ExtractionGroup    `json:"members"`
	NonMembers *ExtractionGroup   `json:"non_members,omitempty"`
	Prefixes   []PrefixExtraction `json:"prefixes,omitempty"`
}

// CheckExtraction returns the probes' count of docs under p for a model
// of maxPositions positions, or an error when no document has a probe
// (what Extraction would refuse), so that a caller can refuse the
// documents before it trains.
func CheckExtraction(docs []Document, p Protocol, maxPositions int) (probes, skipped int, err error) {
	if err := p.Validate(); err != nil {
		return 0, 0, err
	}
	if p.MaxTokens == 0 || p.MaxTokens > maxPositions {
		p.MaxTokens = maxPositions
	}
	if err := checkMasks(docs, p); err != nil {
		return 0, 0, err
	}
	_, ps, _, skipped := probeDocuments(docs, p, maxPositions)
	if len(ps) == 0 {
		return 0, skipped, fmt.Errorf("memorization: no document has enough tokens for %s (%d documents)", p, len(docs))
	}
	return len(ps), skipped, nil
}

// Extraction decodes every probe of docs greedily (the batched driver
// Evaluate uses, with the KV cache) and returns exact and token match of
// members and non-members, equal to Evaluate's means on the same
// documents and protocol. Documents too short are skipped. On a grid
// every rank calls it and gets the same summary.
func Extraction(m *llama.Model, docs []Document, cfg ExtractionConfig) (*ExtractionSummary, error) {
	if cfg.Batch < 0 {
		return nil, fmt.Errorf("memorization: batch %d: want 0 (8) or more", cfg.Batch)
	}
	p := cfg.Protocol
	if err := p.Validate(); err != nil {
		return nil, err
	}
	maxPos := m.Config.MaxPositionEmbeddings
	if p.MaxTokens == 0 || p.MaxTokens > maxPos {
		p.MaxTokens = maxPos
	}
	if err := checkMasks(docs, p); err != nil {
		return nil, err
	}
	results, probes, owner, _ := probeDocuments(docs, p, maxPos)
	if len(probes) == 0 {
		return nil, fmt.Errorf("memorization: no document has enough tokens for %s (%d documents)", p, len(docs))
	}
	if err := extractProbes(m, probes, owner, results, ExtractOptions{Batch: cfg.Batch, StopIDs: cfg.StopIDs}, nil); err != nil {
		return nil, err
	}
	return summarizeExtraction(results, p), nil
}

// summarizeExtraction aggregates the probes of results by prefix length,
// in the order (and so with the sums) of Summarize.
func summarizeExtraction(results []DocResult, p Protocol) *ExtractionSummary {
	s := &ExtractionSummary{Protocol: p.Key()}
	var ks []int
	seen := map[int]bool{}
	hasNon := false
	for _, r := range results {
		if r.Skipped != "" {
			continue
		}
		if !r.Member {
			hasNon = true
		}
		for _, pr := range r.Probes {
			if k := prefixKey(p, pr.K); !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
	}
	slices.Sort(ks)
	for _, k := range ks {
		pe := PrefixExtraction{K: k, Members: extractionGroup(results, p, k, true)}
		if hasNon {
			g := extractionGroup(results, p, k, false)
			pe.NonMembers = &g
		}
		s.Prefixes = append(s.Prefixes, pe)
	}
	if n := len(s.Prefixes); n > 0 {
		last := s.Prefixes[n-1]
		s.Members, s.NonMembers = last.Members, last.NonMembers
		if n == 1 {
			s.Prefixes = nil
		}
	}
	return s
}

// extractionGroup is group's exact and token means alone.
func extractionGroup(results []DocResult, p Protocol, k int, member bool) ExtractionGroup {
	var exact, tok []float64
	eachProbe(results, p, k, member, func(_ *DocResult, pr *Result) {
		exact = append(exact, b2f(pr.Exact))
		tok = append(tok, pr.TokenMatch)
	})
	return ExtractionGroup{Documents: len(exact), Exact: Mean(exact), Token: Mean(tok)}
}
