package data

import (
	"errors"
	"fmt"
	"io"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// ReadTokenized reads every document of paths (as NewReader reads them)
// as token ids (Text is left empty): text is encoded with tok, with BOS (and the tokenizer's
// other special tokens) when bos is set; pre-tokenized ids are taken as
// they are. A text document without a tokenizer (tok nil) is an error
// naming it. Skipped records are counted in the returned problems, or,
// with opt.Strict, are an error.
//
// It is the one reader of documents to score: eval loss's files, and
// memorization's.
func ReadTokenized(paths []string, tok *tokenizer.Tokenizer, bos bool, opt ReadOptions) ([]Document, *Problems, error) {
	if tok != nil && opt.VocabSize == 0 {
		opt.VocabSize = tok.VocabSize()
	}
	r, err := NewReader(paths, opt)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var docs []Document
	var texts []string
	var slots []int
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if d.IDs == nil {
			if tok == nil {
				return nil, nil, fmt.Errorf("data: %s:%d: a text document needs a tokenizer (give token ids as \"input_ids\", or a model with a tokenizer.json)", d.Source, d.Line)
			}
			texts = append(texts, d.Text)
			slots = append(slots, len(docs))
		}
		docs = append(docs, d)
	}
	if len(texts) > 0 {
		enc, errs := tok.EncodeBatchEach(texts, tokenizer.EncodeOptions{AddSpecial: bos}, 0)
		for i, ids := range enc {
			if errs != nil && errs[i] != nil {
				d := docs[slots[i]]
				return nil, nil, fmt.Errorf("data: %s:%d: %w", d.Source, d.Line, errs[i])
			}
			docs[slots[i]].IDs, docs[slots[i]].Text = ids, ""
		}
	}
	return docs, r.Problems(), nil
}
