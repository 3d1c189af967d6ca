package gguf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/inputfile"
)

// GGUF's token types (llama.cpp's llama_token_type, SentencePiece's).
const (
	tokenNormal      int32 = 1
	tokenUnknown     int32 = 2
	tokenControl     int32 = 3
	tokenUserDefined int32 = 4
	tokenUnused      int32 = 5
	tokenByte        int32 = 6
)

// TokenizerMetadata is the tokenizer of the checkpoint folder dir in GGUF's
// form, for a model of configuration cfg, as llama.cpp's converter writes
// it:
//
//   - Llama 2's SentencePiece-style BPE (byte fallback, "▁" for spaces) as
//     tokenizer.ggml.model "llama": tokens, scores and token types. The
//     scores order the merges: llama.cpp merges the adjacent pair whose
//     result scores highest, so a token made by merge r (the first that
//     makes it) scores −r and merges in HF's order; the other tokens score
//     0, as SentencePiece's byte and control pieces do.
//   - Llama 3's byte-level BPE as "gpt2": tokens, token types, the merges
//     ("Ġ t") in rank order, and tokenizer.ggml.pre "llama-bpe", llama.cpp's
//     name for Llama 3's pre-tokenizer.
//
// The token list has cfg.VocabSize entries, one a row of the embedding:
// ids no token has are "[PADi]", unused. Then the BOS, EOS, unknown and
// padding ids, whether the tokenizer adds BOS and EOS, and the chat
// template of tokenizer_config.json (a list of named templates is the
// default as tokenizer.chat_template and the others as
// tokenizer.chat_template.NAME).
func TokenizerMetadata(dir string, cfg *checkpoints.Config) ([]KV, error) {
	path := checkpoints.TokenizerPathIn(dir)
	if path == "" {
		return nil, fmt.Errorf("gguf: %s has no %s: a GGUF file carries its tokenizer", dir, tokenizer.FileName)
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return nil, err
	}
	n := cfg.VocabSize
	if tok.VocabSize() > n {
		return nil, fmt.Errorf("gguf: %s: the tokenizer has %d tokens, more than the model's vocab_size %d", path, tok.VocabSize(), n)
	}
	var model string
	switch tok.Family() {
	case "bpe/sentencepiece":
		model = "llama"
	case "bpe/byte-level":
		model = "gpt2"
	default:
		return nil, fmt.Errorf("gguf: %s: a %s tokenizer has no GGUF form here (want Llama 2's SentencePiece-style BPE or Llama 3's byte-level BPE)", path, tok.Family())
	}
	tokens := make([]string, n)
	types := make([]int32, n)
	for id := range n {
		t, _ := tok.Token(int32(id))
		tokens[id] = t
		switch tok.Kind(int32(id)) {
		case tokenizer.KindNone:
			tokens[id], types[id] = fmt.Sprintf("[PAD%d]", id), tokenUnused
		case tokenizer.KindNormal:
			types[id] = tokenNormal
		case tokenizer.KindUnknown:
			types[id] = tokenUnknown
		case tokenizer.KindSpecial:
			types[id] = tokenControl
		case tokenizer.KindAdded:
			types[id] = tokenUserDefined
		case tokenizer.KindByte:
			types[id] = tokenByte
		}
	}
	kvs := []KV{{"tokenizer.ggml.model", model}}
	merges := tok.Merges()
	if model == "llama" {
		scores := make([]float32, n)
		made := make([]bool, n)
		for r, m := range merges {
			if !made[m.Result] {
				made[m.Result], scores[m.Result] = true, -float32(r)
			}
		}
		kvs = append(kvs, KV{"tokenizer.ggml.tokens", tokens}, KV{"tokenizer.ggml.scores", scores}, KV{"tokenizer.ggml.token_type", types})
	} else {
		lines := make([]string, len(merges))
		for i, m := range merges {
			l, _ := tok.Token(m.Left)
			r, _ := tok.Token(m.Right)
			lines[i] = l + " " + r
		}
		kvs = append(kvs, KV{"tokenizer.ggml.pre", "llama-bpe"}, KV{"tokenizer.ggml.tokens", tokens},
			KV{"tokenizer.ggml.token_type", types}, KV{"tokenizer.ggml.merges", lines})
	}
	bos, hasBOS := tok.BOS()
	if !hasBOS && len(cfg.BOSTokenIDs) > 0 {
		bos, hasBOS = int32(cfg.BOSTokenIDs[0]), true
	}
	eos, hasEOS := tok.EOS()
	if !hasEOS && len(cfg.EOSTokenIDs) > 0 {
		eos, hasEOS = int32(cfg.EOSTokenIDs[0]), true
	}
	if hasBOS {
		kvs = append(kvs, KV{"tokenizer.ggml.bos_token_id", uint32(bos)})
	}
	if hasEOS {
		kvs = append(kvs, KV{"tokenizer.ggml.eos_token_id", uint32(eos)})
	}
	for id := range n {
		if tok.Kind(int32(id)) == tokenizer.KindUnknown {
			kvs = append(kvs, KV{"tokenizer.ggml.unknown_token_id", uint32(id)})
			break
		}
	}
	tc, err := readTokenizerConfig(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	if pad, ok := padID(cfg, tok, tc); ok {
		kvs = append(kvs, KV{"tokenizer.ggml.padding_token_id", uint32(pad)})
	}
	// What the post-processor adds around a text is what llama.cpp adds.
	around := tok.Encode("", tokenizer.EncodeOptions{AddSpecial: true})
	addBOS := hasBOS && len(around) > 0 && around[0] == bos
	addEOS := hasEOS && len(around) > 0 && around[len(around)-1] == eos && !(addBOS && len(around) == 1)
	kvs = append(kvs, KV{"tokenizer.ggml.add_bos_token", addBOS}, KV{"tokenizer.ggml.add_eos_token", addEOS})
	templates, err := chatTemplates(tc)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", filepath.Join(filepath.Dir(path), tokenizer.ConfigFileName), err)
	}
	return append(kvs, templates...), nil
}

// tokenizerConfig is what TokenizerMetadata reads of tokenizer_config.json
// besides the BOS and EOS tokens, which the tokenizer itself reads.
type tokenizerConfig struct {
	PadToken     json.RawMessage `json:"pad_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

func readTokenizerConfig(dir string) (tokenizerConfig, error) {
	var tc tokenizerConfig
	file := filepath.Join(dir, tokenizer.ConfigFileName)
	b, err := inputfile.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return tc, nil
	}
	if err != nil {
		return tc, fmt.Errorf("gguf: %w", err)
	}
	if err := json.Unmarshal(b, &tc); err != nil {
		return tc, fmt.Errorf("gguf: %s: not a tokenizer_config.json file: %w", file, err)
	}
	return tc, nil
}

// padID is config.json's pad_token_id, else tokenizer_config.json's
// pad_token's id.
func padID(cfg *checkpoints.Config, tok *tokenizer.Tokenizer, tc tokenizerConfig) (int32, bool) {
	if cfg.PadTokenID != nil && *cfg.PadTokenID >= 0 && *cfg.PadTokenID < cfg.VocabSize {
		return int32(*cfg.PadTokenID), true
	}
	name, err := tokenizer.TokenName(tc.PadToken)
	if err != nil || name == "" {
		return 0, false
	}
	return tok.TokenID(name)
}

// chatTemplates reads chat_template: a string, or a list of {name,
// template} objects.
func chatTemplates(tc tokenizerConfig) ([]KV, error) {
	if len(tc.ChatTemplate) == 0 || string(tc.ChatTemplate) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(tc.ChatTemplate, &s); err == nil {
		return []KV{{"tokenizer.chat_template", s}}, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(tc.ChatTemplate, &list); err != nil {
		return nil, errors.New("chat_template: want a string or a list of {name, template}")
	}
	var kvs []KV
	for _, t := range list {
		key := "tokenizer.chat_template"
		if t.Name != "default" {
			key += "." + t.Name
		}
		kvs = append(kvs, KV{key, t.Template})
	}
	return kvs, nil
}
