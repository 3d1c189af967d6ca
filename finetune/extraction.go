package finetune

import (
	"fmt"
	"strconv"

	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

// validate checks the extraction block on its own: with every set, data
// and a protocol its lengths make; errors name the key as written.
func (e *Extraction) validate() error {
	if e.Every == 0 {
		return nil
	}
	if e.Data == "" {
		return fmt.Errorf("finetune: extraction: every is %d but data is empty (a dataset folder or files of member documents)", e.Every)
	}
	if e.Batch <= 0 {
		return fmt.Errorf("finetune: extraction: batch %d: want 1 or more", e.Batch)
	}
	if _, err := e.protocol(); err != nil {
		return err
	}
	if _, err := e.sources(); err != nil {
		return err
	}
	return nil
}

// protocol is the block's protocol with its lengths.
func (e *Extraction) protocol() (memorization.Protocol, error) {
	items, err := units.SplitList(e.Prefix)
	if err != nil {
		return memorization.Protocol{}, fmt.Errorf("finetune: extraction: prefix: %w", err)
	}
	var ks []int
	for _, it := range items {
		// 0 is the chat protocol's answer prefix of none; the other
		// protocols refuse it.
		k, err := strconv.Atoi(it)
		if err != nil || k < 0 {
			return memorization.Protocol{}, fmt.Errorf("finetune: extraction: prefix: %q is not a length in tokens", it)
		}
		ks = append(ks, k)
	}
	p, err := memorization.ParseProtocol(e.Protocol, ks, e.Suffix)
	if err != nil {
		return p, fmt.Errorf("finetune: extraction: protocol %s: %w", e.Protocol, err)
	}
	return p, nil
}

// sources is where the block's documents come from.
func (e *Extraction) sources() (memorization.DocumentSource, error) {
	var src memorization.DocumentSource
	var err error
	if src.Data, err = units.SplitList(e.Data); err != nil {
		return src, fmt.Errorf("finetune: extraction: data: %w", err)
	}
	if src.NonMembers, err = units.SplitList(e.NonMembers); err != nil {
		return src, fmt.Errorf("finetune: extraction: non_members: %w", err)
	}
	src.Limit = e.Limit
	return src, nil
}

// prepareExtraction reads the extraction block's documents (tokenized
// with the run's tokenizer) and checks that they have probes, when the
// run opens, so that a block that cannot measure anything stops the run
// before its first step rather than at its first measurement.
func (r *Run) prepareExtraction(maxPositions int) error {
	e := &r.Config.Extraction
	p, err := e.protocol()
	if err != nil {
		return err
	}
	src, err := e.sources()
	if err != nil {
		return err
	}
	src.Chat = p.Name == "chat" // conversations with their loss mask
	var tok *tokenizer.Tokenizer
	if tj, ok := r.files[tokenizer.FileName]; ok {
		if tok, err = tokenizer.Parse(r.Config.Model, tj, r.files[tokenizer.ConfigFileName]); err != nil {
			return fmt.Errorf("finetune: extraction: %w", err)
		}
	}
	docs, err := memorization.LoadDocuments(src, tok)
	if err != nil {
		return fmt.Errorf("finetune: extraction: data %s: %w", e.Data, err)
	}
	if _, _, err := memorization.CheckExtraction(docs, p, maxPositions); err != nil {
		return fmt.Errorf("finetune: extraction: data %s: %w", e.Data, err)
	}
	r.extract = &extraction{docs: docs, cfg: memorization.ExtractionConfig{Protocol: p, Batch: e.Batch, StopIDs: StopIDs(tok)}}
	return nil
}

// extraction is the block's documents and settings, prepared.
type extraction struct {
	docs []memorization.Document
	cfg  memorization.ExtractionConfig
}

// Extract measures greedy extraction of the extraction block's documents
// with the model as it is now. On a grid every rank calls it and gets the
// same summary. It returns nil when the run has no extraction block.
func (r *Run) Extract() (*memorization.ExtractionSummary, error) {
	if r.extract == nil {
		return nil, nil
	}
	s, err := memorization.Extraction(r.Model, r.extract.docs, r.extract.cfg)
	if err != nil {
		return nil, fmt.Errorf("finetune: extraction: step %d: %w", r.Step, err)
	}
	return s, nil
}
