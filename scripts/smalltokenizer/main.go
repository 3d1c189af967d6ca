// Command smalltokenizer derives a smaller-vocabulary tokenizer from the
// embedded Llama 2 tokenizer, for studies of small models whose cost and
// parameters the 32,000-token embedding would otherwise dominate:
//
//	go run ./scripts/smalltokenizer -vocab 4096 -out experiments/specs/llama2-4k
//
// It keeps Llama 2's normalizer, decoder, special tokens and byte
// fallback, and of its BPE model the three special tokens, the 256 byte
// tokens, the single characters of printable ASCII and the most frequent
// others (Llama 2 numbers its single characters by frequency), and then
// the merged pieces in Llama 2's own order (its merge priority) until the
// vocabulary has -vocab tokens. A merge is kept when both its parts and
// its result are kept, and a piece only when some kept merge makes it
// from kept pieces (checked to a fixed point), so that every token can be
// produced; ids are renumbered in the original order. The result is an
// ordinary Hugging Face tokenizer.json (a BPE of the first merges of Llama
// 2's, byte fallback for every other character) with Llama 2's
// tokenizer_config.json beside it. The output is deterministic.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/memtrain/memtrain/data/assets"
)

func main() {
	vocab := flag.Int("vocab", 4096, "tokens in the derived vocabulary")
	singles := flag.Int("singles", 64, "single characters kept beyond printable ASCII, the most frequent first")
	out := flag.String("out", "", "folder to write tokenizer.json and tokenizer_config.json into")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "smalltokenizer: -out is required")
		os.Exit(2)
	}
	if err := run(*vocab, *singles, *out); err != nil {
		fmt.Fprintln(os.Stderr, "smalltokenizer:", err)
		os.Exit(1)
	}
}

type bpeModel struct {
	Type                    string         `json:"type"`
	Dropout                 *float64       `json:"dropout"`
	UnkToken                string         `json:"unk_token"`
	ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
	FuseUnk                 bool           `json:"fuse_unk"`
	ByteFallback            bool           `json:"byte_fallback"`
	Vocab                   map[string]int `json:"vocab"`
	Merges                  []string       `json:"merges"`
}

func run(size, singles int, out string) error {
	raw, err := assets.Read(assets.Llama2Tokenizer)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	var m bpeModel
	if err := json.Unmarshal(doc["model"], &m); err != nil {
		return err
	}
	if m.Type != "BPE" || !m.ByteFallback {
		return fmt.Errorf("the Llama 2 tokenizer's model is %s (byte fallback %v), want a BPE with byte fallback", m.Type, m.ByteFallback)
	}
	pieces := make([]string, len(m.Vocab))
	for p, id := range m.Vocab {
		pieces[id] = p
	}
	keep := map[string]bool{}
	n := 0
	add := func(p string) {
		if !keep[p] {
			keep[p] = true
			n++
		}
	}
	// Specials and byte tokens, then single characters.
	for _, p := range pieces {
		if strings.HasPrefix(p, "<") && strings.HasSuffix(p, ">") && (p == "<unk>" || p == "<s>" || p == "</s>" || strings.HasPrefix(p, "<0x")) {
			add(p)
		}
	}
	for c := rune(0x21); c < 0x7f; c++ {
		if _, ok := m.Vocab[string(c)]; ok {
			add(string(c))
		}
	}
	add("▁")
	others := 0
	for _, p := range pieces {
		if utf8.RuneCountInString(p) == 1 && !keep[p] && others < singles {
			add(p)
			others++
		}
	}
	// Merged pieces in Llama 2's id order (its merge priority), each only
	// if a merge of kept pieces makes it; a piece's parts may come after
	// it, so the sweep is repeated until the vocabulary is full or nothing
	// more can be made.
	makers := map[string][]string{}
	for _, mg := range m.Merges {
		a, b, ok := strings.Cut(mg, " ")
		if !ok {
			return fmt.Errorf("merge %q is not two pieces", mg)
		}
		makers[a+b] = append(makers[a+b], mg)
	}
	reachable := func(p string) bool {
		for _, mg := range makers[p] {
			a, b, _ := strings.Cut(mg, " ")
			if keep[a] && keep[b] {
				return true
			}
		}
		return false
	}
	for changed := true; changed && n < size; {
		changed = false
		for _, p := range pieces {
			if n >= size {
				break
			}
			if !keep[p] && utf8.RuneCountInString(p) > 1 && reachable(p) {
				add(p)
				changed = true
			}
		}
	}
	if n < size {
		return fmt.Errorf("only %d tokens can be kept, want %d", n, size)
	}
	newVocab := map[string]int{}
	for _, p := range pieces {
		if keep[p] {
			newVocab[p] = len(newVocab)
		}
	}
	var merges []string
	for _, mg := range m.Merges {
		a, b, _ := strings.Cut(mg, " ")
		if keep[a] && keep[b] && keep[a+b] {
			merges = append(merges, mg)
		}
	}
	// Special tokens keep their ids (0, 1, 2), which the added tokens and
	// the post-processor name.
	for i, p := range []string{"<unk>", "<s>", "</s>"} {
		if newVocab[p] != i {
			return fmt.Errorf("%s has id %d, want %d", p, newVocab[p], i)
		}
	}
	m.Vocab, m.Merges = newVocab, merges
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	doc["model"] = mb
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// An object in a fixed key order: the file is the same on every run.
	buf.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			buf.WriteString(",")
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteString(":")
		if err := enc.Encode(doc[k]); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
	}
	buf.WriteString("}\n")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "tokenizer.json"), buf.Bytes(), 0o644); err != nil {
		return err
	}
	cfg, err := assets.Read(assets.Llama2TokenizerConfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "tokenizer_config.json"), cfg, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %d tokens (%d merges) of Llama 2's %d (%d merges)\n", out, len(newVocab), len(merges), len(pieces), len(makers))
	return nil
}
