package memorization

import (
	"cmp"
	"fmt"
	"strings"
)

// A Protocol says how a document becomes extraction probes: which tokens
// are the prompt (prefix) and which the model must reproduce (suffix).
type Protocol struct {
	// Name is "goldfish", "pythia", "carlini" or "custom".
	Name string
	// SuffixLen is the number of tokens to reproduce (50 for goldfish and
	// carlini, 32 for pythia).
	SuffixLen int
	// PrefixLens are the prompt lengths: one for pythia and custom, a list
	// for carlini; unused by goldfish, whose prefix is the rest of the
	// document.
	PrefixLens []int
	// MaxTokens truncates each document first (goldfish: 2,048).
	MaxTokens int
	// MinTokens skips shorter documents (goldfish: documents of ≤ 50
	// tokens are skipped, so 51).
	MinTokens int
}

// Goldfish is the protocol of the goldfish paper's evaluation (Hans et al.
// 2024, eval/data_extraction.py): the first 2,048 tokens (BOS included),
// documents of ≤ 50 tokens skipped, the last suffixLen tokens as the
// suffix and everything before them as the prefix.
func Goldfish(suffixLen int) Protocol {
	return Protocol{Name: "goldfish", SuffixLen: suffixLen, MaxTokens: 2048, MinTokens: max(51, suffixLen+1)}
}

// Pythia is the Pythia memorization protocol: prefix tokens [0:prefixLen],
// suffix [prefixLen:prefixLen+suffixLen] (32/32 by default).
func Pythia(prefixLen, suffixLen int) Protocol {
	return Protocol{Name: "pythia", SuffixLen: suffixLen, PrefixLens: []int{prefixLen}, MinTokens: prefixLen + suffixLen}
}

// Carlini is Carlini et al.'s extractability with k tokens of context: for
// each k, prefix [0:k] and suffix [k:k+suffixLen].
func Carlini(prefixLens []int, suffixLen int) Protocol {
	return Protocol{Name: "carlini", SuffixLen: suffixLen, PrefixLens: append([]int(nil), prefixLens...)}
}

// Custom is prefix [0:prefixLen], suffix [prefixLen:prefixLen+suffixLen].
func Custom(prefixLen, suffixLen int) Protocol {
	p := Pythia(prefixLen, suffixLen)
	p.Name = "custom"
	return p
}

// Validate checks the protocol's lengths.
func (p Protocol) Validate() error {
	if p.SuffixLen <= 0 {
		return fmt.Errorf("memorization: %s protocol: suffix length %d (want > 0)", p.Name, p.SuffixLen)
	}
	switch p.Name {
	case "goldfish":
	case "pythia", "custom", "carlini":
		if len(p.PrefixLens) == 0 {
			return fmt.Errorf("memorization: %s protocol: no prefix length", p.Name)
		}
		for _, k := range p.PrefixLens {
			if k <= 0 {
				return fmt.Errorf("memorization: %s protocol: prefix length %d (want > 0)", p.Name, k)
			}
		}
	default:
		return fmt.Errorf("memorization: unknown protocol %q (want goldfish, pythia, carlini or custom)", p.Name)
	}
	return nil
}

func (p Protocol) String() string {
	if p.Name == "goldfish" {
		return fmt.Sprintf("goldfish(suffix %d, first %d tokens)", p.SuffixLen, p.MaxTokens)
	}
	ks := make([]string, len(p.PrefixLens))
	for i, k := range p.PrefixLens {
		ks[i] = fmt.Sprint(k)
	}
	return fmt.Sprintf("%s(prefix %s, suffix %d)", p.Name, strings.Join(ks, ","), p.SuffixLen)
}

// A Probe is one extraction test: greedy decoding from Prefix should
// reproduce Suffix.
type Probe struct {
	Doc    int     // the document's index
	K      int     // prefix length
	Prefix []int32 // the prompt
	Suffix []int32 // the true continuation
}

// Probes cuts document doc (its token ids, BOS included when the protocol
// wants it) into the protocol's probes: none when it is too short.
func (p Protocol) Probes(doc int, ids []int32) []Probe {
	if p.MaxTokens > 0 && len(ids) > p.MaxTokens {
		ids = ids[:p.MaxTokens]
	}
	if len(ids) < p.MinTokens {
		return nil
	}
	if p.Name == "goldfish" {
		if len(ids) <= p.SuffixLen {
			return nil
		}
		cut := len(ids) - p.SuffixLen
		return []Probe{{Doc: doc, K: cut, Prefix: ids[:cut], Suffix: ids[cut:]}}
	}
	var out []Probe
	for _, k := range p.PrefixLens {
		if k+p.SuffixLen > len(ids) {
			continue
		}
		out = append(out, Probe{Doc: doc, K: k, Prefix: ids[:k], Suffix: ids[k : k+p.SuffixLen]})
	}
	return out
}

// ParseProtocol returns the protocol named name with the given lengths,
// zero meaning the protocol's default: goldfish suffix 50; pythia prefix
// 32 and suffix 32; carlini prefixes 8, 16, 32, 64 and suffix 50; custom
// needs one prefix length and a suffix length.
func ParseProtocol(name string, prefixLens []int, suffixLen int) (Protocol, error) {
	var p Protocol
	switch name {
	case "goldfish":
		if len(prefixLens) > 0 {
			return p, fmt.Errorf("memorization: goldfish protocol: the prefix is the rest of each document; no prefix length")
		}
		p = Goldfish(cmp.Or(suffixLen, 50))
	case "pythia":
		if len(prefixLens) > 1 {
			return p, fmt.Errorf("memorization: pythia protocol: one prefix length, got %d", len(prefixLens))
		}
		k := 32
		if len(prefixLens) == 1 {
			k = prefixLens[0]
		}
		p = Pythia(k, cmp.Or(suffixLen, 32))
	case "carlini":
		if len(prefixLens) == 0 {
			prefixLens = []int{8, 16, 32, 64}
		}
		p = Carlini(prefixLens, cmp.Or(suffixLen, 50))
	case "custom":
		if len(prefixLens) != 1 || suffixLen <= 0 {
			return p, fmt.Errorf("memorization: custom protocol: needs one prefix length and a suffix length")
		}
		p = Custom(prefixLens[0], suffixLen)
	default:
		return p, fmt.Errorf("memorization: unknown protocol %q (want goldfish, pythia, carlini or custom)", name)
	}
	return p, p.Validate()
}

// Key names the protocol in file names: goldfish-50, pythia-32-32,
// carlini-8.16.32-50, custom-16-32.
func (p Protocol) Key() string {
	if p.Name == "goldfish" {
		return fmt.Sprintf("goldfish-%d", p.SuffixLen)
	}
	ks := make([]string, len(p.PrefixLens))
	for i, k := range p.PrefixLens {
		ks[i] = fmt.Sprint(k)
	}
	return fmt.Sprintf("%s-%s-%d", p.Name, strings.Join(ks, "."), p.SuffixLen)
}
