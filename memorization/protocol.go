package memorization

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
)

// A Protocol says how a document becomes extraction probes: which tokens
// are the prompt (prefix) and which the model must reproduce (suffix).
type Protocol struct {
	// Name is "goldfish", "pythia", "carlini", "custom" or "chat".
	Name string
	// SuffixLen is the number of tokens to reproduce (50 for goldfish,
	// carlini and chat, 32 for pythia); chat's are at most the rest of
	// the answer.
	SuffixLen int
	// PrefixLens are the prompt lengths: one for pythia and custom, a list
	// for carlini; unused by goldfish, whose prefix is the rest of the
	// document. Chat has one, P ≥ 0: the answer's tokens that the prompt
	// holds after the conversation up to the answer.
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

// Chat is the protocol of instruction and chat data: a probe per
// assistant answer of a conversation (a maximal run of tokens its loss
// mask keeps, Document.Mask: the answer's content and the end-of-turn
// tokens the template writes after it), whose prefix is every token of
// the conversation before the answer (BOS, the system prompt, the turns
// before and the answer's header: the prompt a user of the model gives)
// plus the answer's first answerPrefix tokens, and whose suffix is the
// next suffixLen tokens of the answer, fewer where the answer ends first.
// An answer of answerPrefix tokens or fewer has no probe (see ChatProbes).
func Chat(answerPrefix, suffixLen int) Protocol {
	return Protocol{Name: "chat", SuffixLen: suffixLen, PrefixLens: []int{answerPrefix}}
}

// Validate checks the protocol's lengths.
// MaxLength bounds a protocol's prefix and suffix lengths: no model has
// more positions (checkpoints.MaxPositions), and a probe's length, their
// sum, is then no overflow.
const MaxLength = checkpoints.MaxPositions

func (p Protocol) Validate() error {
	if p.SuffixLen <= 0 {
		return fmt.Errorf("memorization: %s protocol: suffix length %d (want > 0)", p.Name, p.SuffixLen)
	}
	if p.SuffixLen > MaxLength {
		return fmt.Errorf("memorization: %s protocol: suffix length %d (want 1 to %d)", p.Name, p.SuffixLen, MaxLength)
	}
	for _, k := range p.PrefixLens {
		if k > MaxLength {
			return fmt.Errorf("memorization: %s protocol: prefix length %d (want at most %d)", p.Name, k, MaxLength)
		}
	}
	switch p.Name {
	case "goldfish":
	case "chat":
		if len(p.PrefixLens) != 1 || p.PrefixLens[0] < 0 {
			return fmt.Errorf("memorization: chat protocol: answer prefix lengths %v (want one length ≥ 0)", p.PrefixLens)
		}
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
		return fmt.Errorf("memorization: unknown protocol %q (want goldfish, pythia, carlini, custom or chat)", p.Name)
	}
	return nil
}

func (p Protocol) String() string {
	if p.Name == "goldfish" {
		return fmt.Sprintf("goldfish(suffix %d, first %d tokens)", p.SuffixLen, p.MaxTokens)
	}
	if p.Name == "chat" && len(p.PrefixLens) == 1 {
		return fmt.Sprintf("chat(prompt + %d answer tokens, suffix %d)", p.PrefixLens[0], p.SuffixLen)
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
	// Answer is the assistant answer a chat probe tests, counted from 1
	// in its conversation (0 for the other protocols).
	Answer int
}

// Probes cuts document doc (its token ids, BOS included when the protocol
// wants it) into the protocol's probes: none when it is too short. The
// chat protocol needs the document's loss mask: ChatProbes.
func (p Protocol) Probes(doc int, ids []int32) []Probe {
	if p.Name == "chat" {
		return nil
	}
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

// ChatProbes cuts a conversation (ids, and mask, its loss mask: 1 for an
// assistant turn's tokens) into the chat protocol's probes, one per
// assistant answer in order (Probe.Answer 1, 2, …): an answer is a maximal
// run ids[a:b] of tokens the mask keeps; its probe's prefix is ids[:a+P]
// (P the protocol's answer prefix, K = a+P) and its suffix
// ids[a+P:min(a+P+SuffixLen, b)]. An answer of P tokens or fewer (b−a ≤
// P), or one with nothing before it to prompt with (a+P = 0), has no
// probe: short counts them. ids and mask must be as long as each other.
func (p Protocol) ChatProbes(doc int, ids []int32, mask []uint8) (probes []Probe, short int) {
	if p.Name != "chat" || len(p.PrefixLens) != 1 || len(mask) != len(ids) {
		return nil, 0
	}
	P := p.PrefixLens[0]
	answer := 0
	for a := 0; a < len(ids); {
		if mask[a] == 0 {
			a++
			continue
		}
		b := a + 1
		for b < len(ids) && mask[b] != 0 {
			b++
		}
		answer++
		if cut := a + P; b-a <= P || cut == 0 {
			short++
		} else {
			probes = append(probes, Probe{Doc: doc, K: cut, Prefix: ids[:cut], Suffix: ids[cut:min(cut+p.SuffixLen, b)], Answer: answer})
		}
		a = b
	}
	return probes, short
}

// ParseProtocol returns the protocol named name with the given lengths,
// zero meaning the protocol's default: goldfish suffix 50; pythia prefix
// 32 and suffix 32; carlini prefixes 8, 16, 32, 64 and suffix 50; custom
// needs one prefix length and a suffix length; chat answer prefix 0 (the
// prompt is the conversation up to the answer; an explicit 0 too) and
// suffix 50.
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
	case "chat":
		if len(prefixLens) > 1 {
			return p, fmt.Errorf("memorization: chat protocol: one answer prefix length, got %d", len(prefixLens))
		}
		k := 0
		if len(prefixLens) == 1 {
			k = prefixLens[0]
		}
		p = Chat(k, cmp.Or(suffixLen, 50))
	case "custom":
		if len(prefixLens) != 1 || suffixLen <= 0 {
			return p, fmt.Errorf("memorization: custom protocol: needs one prefix length and a suffix length")
		}
		p = Custom(prefixLens[0], suffixLen)
	default:
		return p, fmt.Errorf("memorization: unknown protocol %q (want goldfish, pythia, carlini, custom or chat)", name)
	}
	return p, p.Validate()
}

// Key names the protocol in file names: goldfish-50, pythia-32-32,
// carlini-8.16.32-50, custom-16-32, chat-0-50 (answer prefix 0, suffix
// 50).
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
