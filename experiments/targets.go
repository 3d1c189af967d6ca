package experiments

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strings"
	"unicode"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
)

// A Passage is a chosen target or held-out document.
type Passage struct {
	Source string  `json:"source"`
	Line   int64   `json:"line"`
	Text   string  `json:"text"`
	IDs    []int32 `json:"-"` // BOS included
	// Repetitions is a canary target's copies in the training data.
	Repetitions int `json:"repetitions,omitempty"`
}

// Selection is the outcome of choosing targets: the documents to memorize
// and the held-out controls, none sharing an Overlap-token run with
// another.
type Selection struct {
	Targets, Holdout []Passage
	Candidates       int // documents of the right length before deduplication
	Overlapping      int // candidates left out for sharing a run with a chosen one
}

// SelectTargets reads the target corpus, cuts it into candidate documents
// of MinTokens to MaxTokens tokens (BOS included), orders them by the seed
// and takes Count targets and then Holdout controls, skipping any
// candidate that shares a run of Overlap tokens with one already taken. It
// is deterministic for a spec.
func SelectTargets(t *Targets, paths []string, tok *tokenizer.Tokenizer) (*Selection, error) {
	r, err := data.NewReader(paths, data.ReadOptions{Field: t.Field})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var texts []string
	var where []Passage
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if d.IDs != nil {
			return nil, fmt.Errorf("targets: %s:%d: pre-tokenized documents are not supported (want text)", d.Source, d.Line)
		}
		pieces := []string{d.Text}
		if t.Passages {
			pieces = passages(d.Text, tok, t.MinTokens, t.MaxTokens)
		}
		for _, p := range pieces {
			texts = append(texts, p)
			where = append(where, Passage{Source: d.Source, Line: d.Line, Text: p})
		}
	}
	enc, errs := tok.EncodeBatchEach(texts, tokenizer.EncodeOptions{AddSpecial: true}, 0)
	var cands []Passage
	for i, ids := range enc {
		if errs != nil && errs[i] != nil {
			continue // a passage the tokenizer refuses is no candidate
		}
		if len(ids) >= t.MinTokens && len(ids) <= t.MaxTokens {
			p := where[i]
			p.IDs = ids
			cands = append(cands, p)
		}
	}
	rng := rand.New(rand.NewPCG(t.Seed, 0x5eed))
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })

	sel := &Selection{Candidates: len(cands)}
	taken := map[uint64]bool{}
	runs := func(ids []int32) []uint64 {
		n := t.Overlap
		if n <= 0 || len(ids) < n {
			return nil
		}
		out := make([]uint64, 0, len(ids)-n+1)
		for i := 0; i+n <= len(ids); i++ {
			h := fnv.New64a()
			var b [4]byte
			for _, id := range ids[i : i+n] {
				b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
				h.Write(b[:])
			}
			out = append(out, h.Sum64())
		}
		return out
	}
	for _, c := range cands {
		if len(sel.Targets) == t.Count && len(sel.Holdout) == t.Holdout {
			break
		}
		rs := runs(c.IDs)
		clash := false
		for _, h := range rs {
			if taken[h] {
				clash = true
				break
			}
		}
		if clash {
			sel.Overlapping++
			continue
		}
		for _, h := range rs {
			taken[h] = true
		}
		if len(sel.Targets) < t.Count {
			sel.Targets = append(sel.Targets, c)
		} else {
			sel.Holdout = append(sel.Holdout, c)
		}
	}
	if len(sel.Targets) < t.Count || len(sel.Holdout) < t.Holdout {
		return nil, fmt.Errorf("targets: %d documents of %d–%d tokens in %s (%d left out for sharing a %d-token run), need %d targets + %d held out",
			sel.Candidates, t.MinTokens, t.MaxTokens, strings.Join(paths, ", "), sel.Overlapping, t.Overlap, t.Count, t.Holdout)
	}
	return sel, nil
}

// passages cuts text into runs of whole sentences of about min to max
// tokens: sentences are added until the run reaches min tokens (counted
// sentence by sentence, which is close to the run's own count); a run
// longer than max is dropped. The caller checks each run's exact length.
func passages(text string, tok *tokenizer.Tokenizer, minTokens, maxTokens int) []string {
	var out []string
	var cur strings.Builder
	n := 1 // BOS
	for _, s := range sentences(text) {
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(s)
		n += len(tok.Encode(s, tokenizer.EncodeOptions{}))
		if n >= minTokens {
			if n <= maxTokens+maxTokens/8 {
				out = append(out, cur.String())
			}
			cur.Reset()
			n = 1
		}
	}
	return out
}

// sentences splits text after '.', '!' or '?' (and any closing quotes or
// brackets) followed by white space, trimming the white space.
func sentences(text string) []string {
	var out []string
	start := 0
	rs := []rune(text)
	for i := 0; i < len(rs); i++ {
		if rs[i] != '.' && rs[i] != '!' && rs[i] != '?' {
			continue
		}
		j := i + 1
		for j < len(rs) && strings.ContainsRune(`"')]”’`, rs[j]) {
			j++
		}
		if j < len(rs) && unicode.IsSpace(rs[j]) {
			if s := strings.TrimSpace(string(rs[start:j])); s != "" {
				out = append(out, s)
			}
			start = j
			i = j
		}
	}
	if s := strings.TrimSpace(string(rs[start:])); s != "" {
		out = append(out, s)
	}
	return out
}
