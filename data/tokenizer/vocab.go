package tokenizer

import (
	"slices"
)

// The vocabulary as a whole, for writers of other tokenizer formats (GGUF's
// tokenizer arrays, checkpoints/gguf): what kind of token each id is and
// the model's merges in rank order.

// TokenKind classifies a token id as SentencePiece's model file and GGUF's
// token types do.
type TokenKind uint8

const (
	KindNone    TokenKind = iota // no token has the id
	KindNormal                   // a token of the model's vocabulary
	KindUnknown                  // the model's unk_token
	KindSpecial                  // a special added token (<s>, <|eot_id|>)
	KindAdded                    // an added token that is not special
	KindByte                     // a byte-fallback token, <0x00> … <0xFF>
)

// Kind returns the kind of the token with the given id. An added token is
// KindSpecial or KindAdded even when the model's vocabulary also has it,
// the unk token aside, as HF's converters to SentencePiece and GGUF class
// them.
func (t *Tokenizer) Kind(id int32) TokenKind {
	if !t.has(id) {
		return KindNone
	}
	m := t.model
	switch {
	case id == m.unk:
		return KindUnknown
	case t.special[id]:
		return KindSpecial
	}
	tok := t.tokens[id]
	if mid, ok := m.vocab[tok]; !ok || mid != id {
		return KindAdded
	}
	if m.byteFallback && len(tok) == 6 && tok[:3] == "<0x" && tok[5] == '>' {
		for _, fid := range m.fallbackIDs {
			if fid == id {
				return KindByte
			}
		}
	}
	return KindNormal
}

// Merge is one of the model's merges: Left and Right become Result.
type Merge struct{ Left, Right, Result int32 }

// Merges returns the model's merges in the order they apply (rank order;
// of a pair given twice, the later, as the encoder applies it).
func (t *Tokenizer) Merges() []Merge {
	type ranked struct {
		rank int32
		m    Merge
	}
	all := make([]ranked, 0, len(t.model.merges))
	for k, mg := range t.model.merges {
		all = append(all, ranked{mg.rank, Merge{Left: int32(uint32(k >> 32)), Right: int32(uint32(k)), Result: mg.id}})
	}
	slices.SortFunc(all, func(a, b ranked) int { return int(a.rank) - int(b.rank) })
	out := make([]Merge, len(all))
	for i, r := range all {
		out[i] = r.m
	}
	return out
}
