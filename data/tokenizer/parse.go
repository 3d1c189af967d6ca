package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// parser builds a Tokenizer from tokenizer.json and reports errors that name
// the file and the JSON field.
type parser struct {
	name string
	t    *Tokenizer
}

func (p *parser) errorf(field, format string, args ...any) error {
	return fmt.Errorf("tokenizer: %s: %s: %w", p.name, field, fmt.Errorf(format, args...))
}

// unmarshal decodes a JSON value of the given field.
func (p *parser) unmarshal(field string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field != "" {
				field += "." + te.Field
			}
			return p.errorf(field, "got JSON %s, want %s", te.Value, jsonType(te.Type.String()))
		}
		return p.errorf(field, "%v", err)
	}
	return nil
}

func jsonType(goType string) string {
	switch {
	case strings.HasPrefix(goType, "["):
		return "array"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "struct"),
		strings.HasPrefix(goType, "tokenizer."):
		return "object"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"),
		strings.HasPrefix(goType, "float"):
		return "number"
	case goType == "bool":
		return "boolean"
	}
	return goType
}

// absent reports whether a JSON field is missing or null.
func absent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

type addedTokenJSON struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// typed is the "type" field of a component.
type typed struct {
	Type string `json:"type"`
}

type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type configJSON struct {
	BOS json.RawMessage `json:"bos_token"`
	EOS json.RawMessage `json:"eos_token"`
}

func parse(name string, data []byte, cfgName string, cfg []byte) (*Tokenizer, error) {
	p := &parser{name: name, t: &Tokenizer{hash: sha256Hex(data)}}
	// Validate once, then split objects with objectFields, which is much
	// faster than encoding/json on the megabytes of vocab and merges.
	if !json.Valid(data) {
		err := json.Unmarshal(data, new(any))
		return nil, fmt.Errorf("tokenizer: %s: not a tokenizer.json file: %w", name, err)
	}
	f, ok := objectFields(data)
	if !ok {
		return nil, fmt.Errorf("tokenizer: %s: not a tokenizer.json file: want a JSON object", name)
	}
	if err := p.model(f["model"]); err != nil {
		return nil, err
	}
	if err := p.normalizer(f["normalizer"]); err != nil {
		return nil, err
	}
	if err := p.addedTokens(f["added_tokens"]); err != nil {
		return nil, err
	}
	if err := p.preTokenizer(f["pre_tokenizer"]); err != nil {
		return nil, err
	}
	if err := p.decoder(f["decoder"]); err != nil {
		return nil, err
	}
	if err := p.postProcessor(f["post_processor"]); err != nil {
		return nil, err
	}
	if err := p.config(cfgName, cfg); err != nil {
		return nil, err
	}
	p.family()
	return p.t, nil
}

// maxSparseIDs bounds how far ids may spread beyond the number of tokens, so
// that the id → token table stays in proportion to the vocabulary.
const maxSparseIDs = 1 << 16

func (p *parser) model(raw json.RawMessage) error {
	if absent(raw) {
		return p.errorf("model", "missing")
	}
	mf, ok := objectFields(raw)
	if !ok {
		return p.errorf("model", "want a JSON object")
	}
	var (
		typ                      string
		dropout                  *float64
		unkToken, prefix, suffix *string
		m                        = &bpe{unk: -1}
	)
	for _, f := range []struct {
		key string
		v   any
	}{
		{"type", &typ},
		{"dropout", &dropout},
		{"unk_token", &unkToken},
		{"continuing_subword_prefix", &prefix},
		{"end_of_word_suffix", &suffix},
		{"fuse_unk", &m.fuseUnk},
		{"byte_fallback", &m.byteFallback},
		{"ignore_merges", &m.ignoreMerges},
	} {
		if r := mf[f.key]; !absent(r) {
			if err := p.unmarshal("model."+f.key, r, f.v); err != nil {
				return err
			}
		}
	}
	switch typ {
	case "BPE":
	case "":
		if absent(mf["merges"]) {
			return p.errorf("model.type", "missing")
		}
	default:
		return p.errorf("model.type", "unsupported tokenizer model %q (want BPE)", typ)
	}
	if dropout != nil && *dropout != 0 {
		return p.errorf("model.dropout", "BPE dropout %v is not supported", *dropout)
	}
	vocab := mf["vocab"]
	if absent(vocab) {
		return p.errorf("model.vocab", "missing")
	}
	if v, ok := fastVocab(vocab); ok {
		m.vocab = v
	} else if err := p.vocab(m, vocab); err != nil {
		return err
	}
	maxID := int32(-1) // ids are not negative
	for _, id := range m.vocab {
		maxID = max(maxID, id)
	}
	if int(maxID) < 2*len(m.vocab)+maxSparseIDs {
		// Two tokens with one id would make decoding depend on which one
		// the table keeps: refused, naming both (in sorted order, so that
		// the message does not depend on map order).
		owner := make([]string, maxID+1)
		taken := make([]bool, maxID+1)
		var dup []string
		var dupID int32
		for tok, id := range m.vocab {
			if taken[id] {
				if cand := []string{min(owner[id], tok), max(owner[id], tok)}; dup == nil || cand[0] < dup[0] {
					dup, dupID = cand, id
				}
			}
			if !taken[id] || tok < owner[id] {
				owner[id] = tok
			}
			taken[id] = true
		}
		if dup != nil {
			return p.errorf("model.vocab", "tokens %q and %q have the same id %d (want one id a token)", dup[0], dup[1], dupID)
		}
	}
	if int(maxID) >= 2*len(m.vocab)+maxSparseIDs {
		return p.errorf("model.vocab", "ids up to %d for %d tokens are too sparse", maxID, len(m.vocab))
	}
	if prefix != nil {
		m.prefix = *prefix
	}
	if suffix != nil {
		m.suffix = *suffix
	}
	if unkToken != nil {
		id, ok := m.vocab[*unkToken]
		if !ok {
			return p.errorf("model.unk_token", "%q is not in model.vocab", *unkToken)
		}
		m.unk = id
	}
	if err := p.merges(m, mf["merges"]); err != nil {
		return err
	}
	m.initLookups()
	p.t.model = m

	// The id → token table, with the added tokens to come.
	t := p.t
	t.tokens = make([]string, maxID+1)
	t.known = make([]bool, maxID+1)
	for tok, id := range m.vocab {
		t.tokens[id] = tok // one token an id: checked above
		t.known[id] = true
	}
	t.vocab = make(map[string]int32, len(m.vocab))
	for tok, id := range m.vocab {
		t.vocab[tok] = id
	}
	return nil
}

// vocab reads model.vocab where fastVocab cannot, naming the bad entry.
func (p *parser) vocab(m *bpe, raw json.RawMessage) error {
	var entries map[string]json.RawMessage
	if err := p.unmarshal("model.vocab", raw, &entries); err != nil {
		return err
	}
	if k, ok := duplicateKey(raw); ok {
		return p.errorf("model.vocab", "token %q appears twice", k)
	}
	m.vocab = make(map[string]int32, len(entries))
	for _, tok := range slices.Sorted(maps.Keys(entries)) {
		var id int32
		if err := json.Unmarshal(entries[tok], &id); err != nil || id < 0 {
			return p.errorf("model.vocab", "token %q has id %s, want an integer in [0, 2³¹)", tok, clip(entries[tok]))
		}
		m.vocab[tok] = id
	}
	return nil
}

// merges reads model.merges, either "a b" strings or ["a", "b"] pairs.
func (p *parser) merges(m *bpe, raw json.RawMessage) error {
	m.merges = make(map[uint64]merge)
	if absent(raw) {
		return nil
	}
	pairs, ok := fastMerges(raw)
	if !ok {
		// The slow path, which names the bad entry.
		var items []json.RawMessage
		if err := p.unmarshal("model.merges", raw, &items); err != nil {
			return err
		}
		pairs = make([][2]string, 0, len(items))
		strs := 0
		for i, it := range items {
			field := fmt.Sprintf("model.merges[%d]", i)
			var line string
			var pair []string
			switch {
			case json.Unmarshal(it, &line) == nil:
				strs++
				if strings.HasPrefix(line, "#version") {
					continue // as HF, in the string form
				}
				a, b, ok := strings.Cut(line, " ")
				if !ok || strings.Contains(b, " ") {
					return p.errorf(field, "%q is not two tokens separated by a space", line)
				}
				pairs = append(pairs, [2]string{a, b})
			case json.Unmarshal(it, &pair) == nil && len(pair) == 2:
				pairs = append(pairs, [2]string{pair[0], pair[1]})
			default:
				return p.errorf(field, "%s is not a string \"a b\" or a pair [\"a\", \"b\"]", clip(it))
			}
		}
		if strs != 0 && strs != len(items) {
			return p.errorf("model.merges", "mixes strings and pairs")
		}
	}
	if len(pairs) > math.MaxInt32 {
		return p.errorf("model.merges", "too many merges")
	}
	m.merges = make(map[uint64]merge, len(pairs))
	var buf []byte
	for i, pr := range pairs {
		a, ok := m.vocab[pr[0]]
		if !ok {
			return p.errorf(fmt.Sprintf("model.merges[%d]", i), "token %q is not in model.vocab", pr[0])
		}
		b, ok := m.vocab[pr[1]]
		if !ok {
			return p.errorf(fmt.Sprintf("model.merges[%d]", i), "token %q is not in model.vocab", pr[1])
		}
		right := pr[1]
		if m.prefix != "" {
			right = strings.TrimPrefix(right, m.prefix)
		}
		buf = append(append(buf[:0], pr[0]...), right...)
		id, ok := m.vocab[string(buf)]
		if !ok {
			return p.errorf(fmt.Sprintf("model.merges[%d]", i), "merged token %q is not in model.vocab", pr[0]+right)
		}
		// As in HF, a repeated merge takes the later rank.
		m.merges[pairKey(a, b)] = merge{rank: int32(i), id: id}
	}
	return nil
}

// clip shortens a JSON value for an error message.
func clip(b []byte) string {
	const n = 40
	if len(b) <= n {
		return string(b)
	}
	for i := n; i > 0; i-- {
		if utf8.RuneStart(b[i]) {
			return string(b[:i]) + "…"
		}
	}
	return "…"
}

// addedTokens reads added_tokens as HF's AddedVocabulary::add_tokens does.
// The ids in the file are not used: a token of the model's vocabulary keeps
// its id, and the others are numbered in order after the vocabulary. (In
// files that HF wrote, these are the ids in the file.) Tokens marked
// normalized are matched in normalized text, so their content is normalized
// too; it needs the normalizer.
func (p *parser) addedTokens(raw json.RawMessage) error {
	t := p.t
	var list []addedTokenJSON
	if !absent(raw) {
		if err := p.unmarshal("added_tokens", raw, &list); err != nil {
			return err
		}
	}
	vocabLen := int64(len(t.model.vocab))
	byContent := map[string]int32{}
	byID := map[int32]addedToken{}
	var order []addedToken         // in the order of the file, as given
	exact := map[addedToken]bool{} // tokens as given, without ids
	maxAdded := int64(-1)
	for i, a := range list {
		field := fmt.Sprintf("added_tokens[%d]", i)
		if a.ID == nil {
			return p.errorf(field+".id", "missing")
		}
		if *a.ID < 0 || *a.ID > math.MaxUint32 {
			return p.errorf(field+".id", "%d is out of range", *a.ID)
		}
		normalized := !a.Special
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		tok := addedToken{content: a.Content, special: a.Special, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: normalized}
		if a.Content == "" || exact[tok] {
			continue // as HF
		}
		exact[tok] = true
		var id int64
		if v, ok := byContent[a.Content]; ok {
			id = int64(v)
		} else if v, ok := t.model.vocab[a.Content]; ok {
			id = int64(v)
		} else if maxAdded >= vocabLen || maxAdded >= 0 && vocabLen == 0 {
			id = maxAdded + 1
		} else {
			id = vocabLen
		}
		if id > math.MaxInt32 {
			return p.errorf(field, "too many tokens")
		}
		tok.id = int32(id)
		maxAdded = max(maxAdded, id)
		byContent[a.Content] = tok.id
		byID[tok.id] = tok
		order = append(order, tok)
	}

	size := len(t.tokens)
	for id := range byID {
		size = max(size, int(id)+1)
	}
	t.tokens = slices.Grow(t.tokens, size-len(t.tokens))[:size]
	t.known = slices.Grow(t.known, size-len(t.known))[:size]
	t.special = make([]bool, size)
	for id, a := range byID {
		t.tokens[id] = a.content
		t.known[id] = true
		t.special[id] = a.special
	}
	for c, id := range byContent {
		t.vocab[c] = id
	}

	// The matchers, from the current flags of each token.
	var rawTokens, normTokens []addedToken
	seen := map[string]bool{}
	for _, a := range order {
		if seen[a.content] {
			continue
		}
		seen[a.content] = true
		a = byID[byContent[a.content]]
		if a.normalized {
			if t.normalizer != nil {
				s, err := t.normalize(a.content)
				if err != nil {
					return fmt.Errorf("%w (normalizing added token %q)", err, clip([]byte(a.content)))
				}
				a.content = s
			}
			normTokens = append(normTokens, a)
		} else {
			rawTokens = append(rawTokens, a)
		}
	}
	t.added = newMatcher(rawTokens)
	t.normAdded = newMatcher(normTokens)
	return nil
}

func (p *parser) pattern(field string, raw json.RawMessage) (pattern, error) {
	var pj patternJSON
	if err := p.unmarshal(field, raw, &pj); err != nil {
		return pattern{}, err
	}
	switch {
	case pj.String != nil && pj.Regex == nil:
		return pattern{literal: *pj.String}, nil
	case pj.Regex != nil && pj.String == nil:
		return p.regex(field+".Regex", *pj.Regex)
	}
	return pattern{}, p.errorf(field, "want {\"String\": …} or {\"Regex\": …}")
}

func (p *parser) regex(field, expr string) (pattern, error) {
	if expr == llama3Pattern {
		return pattern{llama3: true}, nil
	}
	pat, err := compileRegex(expr, p.where(field))
	if err != nil {
		return pattern{}, p.errorf(field, "%v", err)
	}
	return pat, nil
}

// where names a field of the file, for the errors of encoding.
func (p *parser) where(field string) string { return fmt.Sprintf("tokenizer: %s: %s", p.name, field) }

func (p *parser) normalizer(raw json.RawMessage) error {
	n, err := p.normalizerAt("normalizer", raw)
	if err != nil {
		return err
	}
	p.t.normalizer = n
	return nil
}

func (p *parser) normalizerAt(field string, raw json.RawMessage) (normalizer, error) {
	if absent(raw) {
		return nil, nil
	}
	var ty typed
	if err := p.unmarshal(field, raw, &ty); err != nil {
		return nil, err
	}
	switch ty.Type {
	case "Sequence":
		var v struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return nil, err
		}
		var seq normalizerSeq
		for i, r := range v.Normalizers {
			n, err := p.normalizerAt(fmt.Sprintf("%s.normalizers[%d]", field, i), r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		switch len(seq) {
		case 0:
			return nil, nil
		case 1:
			return seq[0], nil
		}
		return seq, nil
	case "Prepend":
		var v struct {
			Prepend string `json:"prepend"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return nil, err
		}
		return prepend{v.Prepend, p.where(field)}, nil
	case "Replace":
		var v struct {
			Pattern json.RawMessage `json:"pattern"`
			Content string          `json:"content"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return nil, err
		}
		pat, err := p.pattern(field+".pattern", v.Pattern)
		if err != nil {
			return nil, err
		}
		return replace{pat, v.Content, p.where(field)}, nil
	case "NFC", "NFD", "NFKC", "NFKD":
		return unicodeForm{unicodeForms[ty.Type], p.where(field)}, nil
	case "Strip":
		var v struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return nil, err
		}
		return strip{v.Left, v.Right}, nil
	case "":
		return nil, p.errorf(field+".type", "missing")
	}
	return nil, p.errorf(field+".type", "unsupported normalizer %q", ty.Type)
}

func (p *parser) preTokenizer(raw json.RawMessage) error {
	var stages []preTokenizer
	if err := p.preTokenizerAt("pre_tokenizer", raw, &stages); err != nil {
		return err
	}
	// ByteLevel maps bytes to characters after all splitting: it must come
	// last. Then, without a prefix space or regex, it splits nothing.
	for i, s := range stages {
		b, ok := s.(*byteLevelPre)
		if !ok {
			continue
		}
		if i != len(stages)-1 {
			return p.errorf("pre_tokenizer", "ByteLevel must be the last pre-tokenizer")
		}
		p.t.byteLevel = true
		if !b.addPrefixSpace && b.regex == nil {
			stages = stages[:i]
		}
	}
	switch len(stages) {
	case 0:
	case 1:
		p.t.pre = stages[0]
	default:
		p.t.pre = preTokenizerSeq(stages)
	}
	return nil
}

// preTokenizerAt appends the pre-tokenizers at field to stages, flattening
// sequences.
func (p *parser) preTokenizerAt(field string, raw json.RawMessage, stages *[]preTokenizer) error {
	if absent(raw) {
		return nil
	}
	var ty typed
	if err := p.unmarshal(field, raw, &ty); err != nil {
		return err
	}
	switch ty.Type {
	case "Sequence":
		var v struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return err
		}
		for i, r := range v.PreTokenizers {
			if err := p.preTokenizerAt(fmt.Sprintf("%s.pretokenizers[%d]", field, i), r, stages); err != nil {
				return err
			}
		}
		return nil
	case "Split":
		var v struct {
			Pattern  json.RawMessage `json:"pattern"`
			Behavior string          `json:"behavior"`
			Invert   bool            `json:"invert"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return err
		}
		pat, err := p.pattern(field+".pattern", v.Pattern)
		if err != nil {
			return err
		}
		b, ok := splitBehaviors[v.Behavior]
		if !ok {
			return p.errorf(field+".behavior", "unknown split behavior %q", v.Behavior)
		}
		*stages = append(*stages, &splitPre{pattern: pat, behavior: b, invert: v.Invert})
		return nil
	case "ByteLevel":
		v := struct {
			AddPrefixSpace bool `json:"add_prefix_space"`
			UseRegex       bool `json:"use_regex"`
		}{UseRegex: true}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return err
		}
		b := &byteLevelPre{addPrefixSpace: v.AddPrefixSpace}
		if v.UseRegex {
			pat, err := p.regex(field, gpt2Pattern)
			if err != nil {
				return err
			}
			b.regex = &splitPre{pattern: pat, behavior: splitIsolated}
		}
		*stages = append(*stages, b)
		return nil
	case "Metaspace":
		v := struct {
			Replacement    string `json:"replacement"`
			PrependScheme  string `json:"prepend_scheme"`
			AddPrefixSpace *bool  `json:"add_prefix_space"`
			Split          *bool  `json:"split"`
		}{Replacement: "▁"}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return err
		}
		scheme, err := p.prependScheme(field, v.PrependScheme, v.AddPrefixSpace)
		if err != nil {
			return err
		}
		if utf8.RuneCountInString(v.Replacement) != 1 {
			return p.errorf(field+".replacement", "%q is not one character", v.Replacement)
		}
		m := &metaspacePre{replacement: v.Replacement, prepend: scheme}
		if v.Split == nil || *v.Split {
			m.split_ = &splitPre{pattern: pattern{literal: v.Replacement}, behavior: splitMergedWithNext}
		}
		*stages = append(*stages, m)
		return nil
	case "":
		return p.errorf(field+".type", "missing")
	}
	return p.errorf(field+".type", "unsupported pre-tokenizer %q", ty.Type)
}

func (p *parser) prependScheme(field, scheme string, addPrefixSpace *bool) (prependScheme, error) {
	switch scheme {
	case "always":
		return prependAlways, nil
	case "first":
		return prependFirst, nil
	case "never":
		return prependNever, nil
	case "":
		if addPrefixSpace != nil && !*addPrefixSpace {
			return prependNever, nil
		}
		return prependAlways, nil
	}
	return 0, p.errorf(field+".prepend_scheme", "unknown prepend scheme %q", scheme)
}

func (p *parser) decoder(raw json.RawMessage) error {
	d, err := p.decoderAt("decoder", raw)
	if err != nil {
		return err
	}
	p.t.decoder = d
	_, p.t.byteLevelOnly = d.(byteLevelDecoder)
	return nil
}

func (p *parser) decoderAt(field string, raw json.RawMessage) (decoder, error) {
	if absent(raw) {
		return nil, nil
	}
	var ty typed
	if err := p.unmarshal(field, raw, &ty); err != nil {
		return nil, err
	}
	switch ty.Type {
	case "Sequence":
		var v struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return nil, err
		}
		seq := decoderSeq{}
		for i, r := range v.Decoders {
			d, err := p.decoderAt(fmt.Sprintf("%s.decoders[%d]", field, i), r)
			if err != nil {
				return nil, err
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		if len(seq) == 1 {
			return seq[0], nil
		}
		return seq, nil
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "Replace":
		var v struct {
			Pattern json.RawMessage `json:"pattern"`
			Content string          `json:"content"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return nil, err
		}
		pat, err := p.pattern(field+".pattern", v.Pattern)
		if err != nil {
			return nil, err
		}
		return replaceDecoder{pat, v.Content, p.where(field)}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Strip":
		var v struct {
			Content string `json:"content"`
			Start   uint32 `json:"start"`
			Stop    uint32 `json:"stop"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return nil, err
		}
		r, n := utf8.DecodeRuneInString(v.Content)
		if n == 0 || n != len(v.Content) {
			return nil, p.errorf(field+".content", "%q is not one character", v.Content)
		}
		return stripDecoder{content: r, start: int(v.Start), stop: int(v.Stop)}, nil
	case "Metaspace":
		v := struct {
			Replacement    string `json:"replacement"`
			PrependScheme  string `json:"prepend_scheme"`
			AddPrefixSpace *bool  `json:"add_prefix_space"`
		}{Replacement: "▁"}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return nil, err
		}
		scheme, err := p.prependScheme(field, v.PrependScheme, v.AddPrefixSpace)
		if err != nil {
			return nil, err
		}
		r, n := utf8.DecodeRuneInString(v.Replacement)
		if n == 0 || n != len(v.Replacement) {
			return nil, p.errorf(field+".replacement", "%q is not one character", v.Replacement)
		}
		return metaspaceDecoder{replacement: r, prepend: scheme}, nil
	case "":
		return nil, p.errorf(field+".type", "missing")
	}
	return nil, p.errorf(field+".type", "unsupported decoder %q", ty.Type)
}

func (p *parser) postProcessor(raw json.RawMessage) error {
	return p.postProcessorAt("post_processor", raw)
}

// postProcessorAt adds the special tokens of the post-processor at field to
// the tokenizer's prefix and suffix, for a single sequence.
func (p *parser) postProcessorAt(field string, raw json.RawMessage) error {
	if absent(raw) {
		return nil
	}
	var ty typed
	if err := p.unmarshal(field, raw, &ty); err != nil {
		return err
	}
	t := p.t
	switch ty.Type {
	case "Sequence":
		var v struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return err
		}
		for i, r := range v.Processors {
			if err := p.postProcessorAt(fmt.Sprintf("%s.processors[%d]", field, i), r); err != nil {
				return err
			}
		}
		return nil
	case "ByteLevel":
		return nil // it only adjusts offsets
	case "TemplateProcessing":
		var v struct {
			Single        json.RawMessage `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return err
		}
		items, err := p.template(field+".single", v.Single)
		if err != nil {
			return err
		}
		var before, after []int32
		seen := false
		for _, it := range items {
			if it == "$A" {
				if seen {
					return p.errorf(field+".single", "more than one $A")
				}
				seen = true
				continue
			}
			st, ok := v.SpecialTokens[it]
			if !ok {
				return p.errorf(field+".special_tokens", "no entry for %q", it)
			}
			if slices.ContainsFunc(st.IDs, func(id int32) bool { return id < 0 }) {
				return p.errorf(field+".special_tokens", "%q has a negative id", it)
			}
			if seen {
				after = append(after, st.IDs...)
			} else {
				before = append(before, st.IDs...)
			}
		}
		if !seen {
			return p.errorf(field+".single", "no $A")
		}
		t.prefix = append(before, t.prefix...)
		t.suffix = append(t.suffix, after...)
		return nil
	case "BertProcessing", "RobertaProcessing":
		var v struct {
			Sep json.RawMessage `json:"sep"`
			Cls json.RawMessage `json:"cls"`
		}
		if err := p.unmarshal(field, raw, &v); err != nil {
			return err
		}
		cls, err := p.tokenWithID(field+".cls", v.Cls)
		if err != nil {
			return err
		}
		sep, err := p.tokenWithID(field+".sep", v.Sep)
		if err != nil {
			return err
		}
		t.prefix = append([]int32{cls}, t.prefix...)
		t.suffix = append(t.suffix, sep)
		return nil
	case "":
		return p.errorf(field+".type", "missing")
	}
	return p.errorf(field+".type", "unsupported post-processor %q", ty.Type)
}

// tokenWithID reads a ["token", id] pair of Bert and Roberta processing.
func (p *parser) tokenWithID(field string, raw json.RawMessage) (int32, error) {
	var v []json.RawMessage
	if absent(raw) {
		return 0, p.errorf(field, "missing")
	}
	if err := p.unmarshal(field, raw, &v); err != nil {
		return 0, err
	}
	var id int32
	if len(v) != 2 || json.Unmarshal(v[1], &id) != nil || id < 0 {
		return 0, p.errorf(field, "want [\"token\", id]")
	}
	return id, nil
}

// template reads a template: "$A" for the sequence, else special token names.
// It is a list of {"SpecialToken": {"id": …}} and {"Sequence": {"id": "A"}}
// objects, or a string such as "<s> $A".
func (p *parser) template(field string, raw json.RawMessage) ([]string, error) {
	if absent(raw) {
		return nil, p.errorf(field, "missing")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		var items []string
		for _, f := range strings.Fields(s) {
			name, typeID, ok := strings.Cut(f, ":")
			if ok {
				if _, err := strconv.ParseUint(typeID, 10, 32); err != nil {
					name = f // a colon in a token's name
				}
			}
			if strings.HasPrefix(name, "$") {
				switch name {
				case "$", "$A", "$0":
					name = "$A"
				default:
					return nil, p.errorf(field, "sequence %q in a single-sequence template", name)
				}
			}
			items = append(items, name)
		}
		return items, nil
	}
	var list []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	}
	if err := p.unmarshal(field, raw, &list); err != nil {
		return nil, err
	}
	var items []string
	for i, it := range list {
		switch {
		case it.SpecialToken != nil && it.Sequence == nil:
			items = append(items, it.SpecialToken.ID)
		case it.Sequence != nil && it.SpecialToken == nil:
			if it.Sequence.ID != "A" {
				return nil, p.errorf(fmt.Sprintf("%s[%d]", field, i), "sequence %q in a single-sequence template", it.Sequence.ID)
			}
			items = append(items, "$A")
		default:
			return nil, p.errorf(fmt.Sprintf("%s[%d]", field, i), "want {\"SpecialToken\": …} or {\"Sequence\": …}")
		}
	}
	return items, nil
}

// config reads the BOS and EOS token names of tokenizer_config.json and
// settles BOS and EOS.
func (p *parser) config(cfgName string, cfg []byte) error {
	t := p.t
	var bosName, eosName string
	if cfg != nil {
		var c configJSON
		if err := json.Unmarshal(cfg, &c); err != nil {
			return fmt.Errorf("tokenizer: %s: not a tokenizer_config.json file: %w", cfgName, err)
		}
		var err error
		if bosName, err = TokenName(c.BOS); err != nil {
			return fmt.Errorf("tokenizer: %s: bos_token: %w", cfgName, err)
		}
		if eosName, err = TokenName(c.EOS); err != nil {
			return fmt.Errorf("tokenizer: %s: eos_token: %w", cfgName, err)
		}
	}
	if id, ok := t.vocab[bosName]; ok && bosName != "" {
		t.bos, t.hasBOS = id, true
	} else if len(t.prefix) > 0 {
		t.bos, t.hasBOS = t.prefix[0], true
	}
	if id, ok := t.vocab[eosName]; ok && eosName != "" {
		t.eos, t.hasEOS = id, true
	} else if len(t.suffix) > 0 {
		t.eos, t.hasEOS = t.suffix[0], true
	} else {
		for _, name := range []string{"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"} {
			if id, ok := t.vocab[name]; ok && t.special[id] {
				t.eos, t.hasEOS = id, true
				break
			}
		}
	}
	return nil
}

// TokenName reads a token of tokenizer_config.json (bos_token, eos_token):
// a string, an AddedToken object's "content", or null ("").
func TokenName(raw json.RawMessage) (string, error) {
	if absent(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("want a string or an object with \"content\"")
	}
	return obj.Content, nil
}

func (p *parser) family() {
	t := p.t
	switch {
	case t.byteLevel:
		t.family = "bpe/byte-level"
	case t.model.byteFallback || usesMetaspace(t):
		t.family = "bpe/sentencepiece"
	default:
		t.family = "bpe"
	}
}

// usesMetaspace reports whether the tokenizer writes spaces as "▁".
func usesMetaspace(t *Tokenizer) bool {
	if _, ok := t.vocab["▁"]; !ok {
		return false
	}
	switch d := t.decoder.(type) {
	case metaspaceDecoder:
		return true
	case decoderSeq:
		for _, x := range d {
			if _, ok := x.(metaspaceDecoder); ok {
				return true
			}
			if r, ok := x.(replaceDecoder); ok && r.pattern.literal == "▁" {
				return true
			}
		}
	}
	return false
}

// duplicateKey returns the first key that a JSON object (already known to
// parse) holds twice: encoding/json keeps the last silently.
func duplicateKey(raw []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		k, _ := t.(string)
		if seen[k] {
			return k, true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}
