package data

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// PrepareConfig controls Prepare.
type PrepareConfig struct {
	// Read is how the inputs are read; its VocabSize is set from the
	// tokenizer.
	Read ReadOptions
	// Mode (ModePack when empty), SeqLen, BOS, EOS, Holdout and Seed are
	// the dataset's settings (see Settings).
	Mode    Mode
	SeqLen  int
	BOS     bool
	EOS     bool
	Holdout float64
	Seed    uint64
	// SplitSpecial encodes special-token text in the input as plain text
	// (see tokenizer.EncodeOptions).
	SplitSpecial bool
	// Threads is the number of encoding goroutines (0: GOMAXPROCS).
	Threads int
	// ChunkBytes is about how much text is encoded at a time, spread over
	// the threads (0: 1 MiB, or 256 KiB per thread if more).
	ChunkBytes int
	// TokenizerFiles, when set, are tok's files (tokenizer.json, and
	// tokenizer_config.json if it has one), stored in the dataset so that
	// it decodes its own tokens (Store.Tokenizer).
	TokenizerFiles map[string][]byte
	// Warn, when set, is told what Prepare kept but a user should know:
	// pretokenized documents that already start with the BOS it adds (a
	// second BOS each).
	Warn func(msg string)
	// Chat, when set, reads chat records (ReadOptions.Chat) and renders
	// each conversation with this template into a document whose loss is
	// on its assistant turns only (ChatTemplate.Encode): a chat dataset,
	// with a loss mask. The template writes BOS, so BOS must be off;
	// special-token text is parsed (SplitSpecial off), as HF does. A
	// conversation the template refuses (raise_exception) is a BadChat
	// problem.
	Chat *ChatTemplate
}

// maxChunkDocs bounds the documents encoded at a time.
const maxChunkDocs = 4096

// Prepare reads the inputs (files or folders), tokenizes them with tok and
// writes the dataset folder out (see CreateStore). Reading, encoding and
// writing overlap; the result does not depend on Threads. Records that do
// not make a document are counted in the manifest's Problems (in strict
// mode, the first is an error), as are texts that encode to no token.
// Inputs that make no document at all are an error, naming them and their
// problems, and nothing is written.
func Prepare(out string, inputs []string, tok *tokenizer.Tokenizer, cfg PrepareConfig) (*Manifest, error) {
	if cfg.Threads < 0 {
		return nil, fmt.Errorf("data: threads %d: want 0 (all cores) or more", cfg.Threads)
	}
	ropt := cfg.Read
	ropt.VocabSize = tok.VocabSize()
	var chat *ChatSettings
	if ct := cfg.Chat; ct != nil {
		switch {
		case cfg.BOS:
			return nil, errors.New("data: a chat template writes its own BOS; chat datasets take no added BOS (--bos=false)")
		case cfg.SplitSpecial:
			return nil, errors.New("data: a chat template's special tokens must be parsed; chat datasets cannot split special tokens")
		}
		ropt.Chat = true
		sum := sha256.Sum256([]byte(ct.Source))
		chat = &ChatSettings{Template: ct.Name, TemplateSHA256: hex.EncodeToString(sum[:])}
		if !ct.now.IsZero() {
			chat.Date = ct.now.Format("2006-01-02")
		}
	}
	r, err := NewReader(inputs, ropt)
	if err != nil {
		return nil, err
	}
	mode := cfg.Mode
	if mode == "" {
		mode = ModePack
	}
	set := Settings{
		Mode: mode, SeqLen: cfg.SeqLen, BOS: cfg.BOS, EOS: cfg.EOS,
		Holdout: cfg.Holdout, Seed: cfg.Seed,
		Format: r.opt.Format, Field: ropt.field(), Pretokenized: ropt.Pretokenized,
		Paragraphs: ropt.Paragraphs, SplitSpecial: cfg.SplitSpecial, Chat: chat,
	}
	if chat != nil {
		set.Field = ""
	}
	w, err := CreateStore(out, TokenizerInfoOf(tok), set)
	if err != nil {
		r.Close()
		return nil, err
	}
	if cfg.TokenizerFiles != nil {
		if err := w.AddTokenizer(cfg.TokenizerFiles); err != nil {
			w.Abort()
			r.Close()
			return nil, err
		}
	}
	chunkBytes := cfg.ChunkBytes
	if chunkBytes <= 0 {
		threads := cfg.Threads
		if threads <= 0 {
			threads = runtime.GOMAXPROCS(0)
		}
		chunkBytes = max(1<<20, threads*256<<10)
	}

	parquetFiles := map[string]bool{}
	for _, s := range r.sources {
		if s.Format == Parquet {
			parquetFiles[s.Path] = true
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
		r.Close()
	}()
	send := func(ch chan<- []Document, chunk []Document) bool {
		select {
		case ch <- chunk:
			return true
		case <-stop:
			return false
		}
	}
	// Read, in chunks.
	chunks := make(chan []Document, 2)
	readErr := make(chan error, 1)
	wg.Go(func() {
		defer close(chunks)
		var chunk []Document
		size := 0
		for {
			doc, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				readErr <- err
				return
			}
			chunk = append(chunk, doc)
			size += len(doc.Text) + 4*len(doc.IDs)
			for _, m := range doc.Messages {
				size += len(m.Content)
			}
			if size >= chunkBytes || len(chunk) >= maxChunkDocs {
				if !send(chunks, chunk) {
					return
				}
				chunk, size = nil, 0
			}
		}
		if len(chunk) > 0 {
			send(chunks, chunk)
		}
	})
	// Encode.
	encoded := make(chan []Document, 2)
	wg.Go(func() {
		defer close(encoded)
		opt := tokenizer.EncodeOptions{SplitSpecial: cfg.SplitSpecial}
		for chunk := range chunks {
			if cfg.Chat != nil {
				encodeChats(cfg.Chat, tok, chunk, cfg.Threads)
				if !send(encoded, chunk) {
					return
				}
				continue
			}
			var texts []string
			for i, d := range chunk {
				if d.IDs == nil {
					texts = append(texts, d.Text)
				} else {
					chunk[i].pretokenized = true
				}
			}
			ids, errs := tok.EncodeBatchEach(texts, opt, cfg.Threads)
			k := 0
			for i := range chunk {
				if chunk[i].IDs == nil {
					chunk[i].IDs = ids[k]
					if errs != nil && errs[k] != nil {
						chunk[i].encodeErr = strings.ReplaceAll(errs[k].Error(), "\n", " ")
					}
					if chunk[i].IDs == nil {
						chunk[i].IDs = []int32{}
					}
					k++
				}
			}
			if !send(encoded, chunk) {
				return
			}
		}
	})
	// Write.
	bos, hasBOS := tok.BOS()
	var doubleBOS int64
	var encProblems Problems
	encProblems.MaxExamples = ropt.MaxExamples
	perSource := map[string]int64{}
	kept := 0
	for chunk := range encoded {
		for _, doc := range chunk {
			if doc.chatErr != "" {
				p := Problem{Source: doc.Source, Line: doc.Line, Row: parquetFiles[doc.Source],
					Kind: BadChat, Detail: doc.chatErr}
				encProblems.Add(p)
				perSource[doc.Source]++
				if ropt.Strict {
					w.Abort()
					return nil, &RecordError{p}
				}
				continue
			}
			if len(doc.IDs) == 0 {
				p := Problem{Source: doc.Source, Line: doc.Line, Row: parquetFiles[doc.Source],
					Kind: EmptyText, Detail: "the text encodes to no tokens"}
				if doc.encodeErr != "" {
					p.Kind, p.Detail = EncodeFailed, doc.encodeErr
				}
				encProblems.Add(p)
				perSource[doc.Source]++
				if ropt.Strict {
					w.Abort()
					return nil, &RecordError{p}
				}
				continue
			}
			if doc.pretokenized && cfg.BOS && hasBOS && doc.IDs[0] == bos {
				doubleBOS++
			}
			if _, err := w.Add(doc); err != nil {
				w.Abort()
				return nil, err
			}
			kept++
		}
	}
	select {
	case err := <-readErr:
		w.Abort()
		return nil, err
	default:
	}
	problems := r.Problems()
	problems.merge(&encProblems)
	if kept == 0 {
		w.Abort()
		return nil, noDocuments(inputs, problems)
	}
	if doubleBOS > 0 && cfg.Warn != nil {
		cfg.Warn(fmt.Sprintf("%d of %d pretokenized documents already start with BOS (id %d) and got a second one; "+
			"prepare them with BOS off to take their ids as given", doubleBOS, kept, bos))
	}
	sources := r.Sources()
	for i := range sources {
		sources[i].Documents -= perSource[sources[i].Path]
		sources[i].Problems += perSource[sources[i].Path]
		perSource[sources[i].Path] = 0
	}
	return w.Commit(sources, problems)
}

// encodeChats renders and tokenizes the conversations of chunk in place,
// on up to threads goroutines (0: GOMAXPROCS): each document's IDs and
// Mask, or chatErr.
func encodeChats(ct *ChatTemplate, tok *tokenizer.Tokenizer, chunk []Document, threads int) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	threads = min(threads, len(chunk))
	var wg sync.WaitGroup
	for g := range threads {
		wg.Go(func() {
			for i := g; i < len(chunk); i += threads {
				d := &chunk[i]
				ids, mask, err := ct.Encode(tok, d.Messages)
				if err != nil {
					d.chatErr = strings.ReplaceAll(err.Error(), "\n", " ")
					continue
				}
				d.IDs, d.Mask, d.Messages = ids, mask, nil
			}
		})
	}
	wg.Wait()
}

// noDocuments is the error of inputs of which no record made a document.
func noDocuments(inputs []string, ps *Problems) error {
	names := inputs
	if len(names) > 3 {
		names = append(slices.Clip(names[:3]), fmt.Sprintf("%d more", len(inputs)-3))
	}
	msg := fmt.Sprintf("data: no document kept from %s: ", strings.Join(names, ", "))
	if ps.Total() == 0 {
		msg += "no records"
	} else {
		msg += fmt.Sprintf("bad records %s, the first %s", ps, ps.Examples[0])
	}
	return errors.New(msg + "; no dataset written")
}

// merge adds the problems of o.
func (ps *Problems) merge(o *Problems) {
	for _, k := range o.Kinds() {
		if ps.Counts == nil {
			ps.Counts = make(map[ProblemKind]int64)
		}
		ps.Counts[k] += o.Counts[k]
	}
	limit := ps.MaxExamples
	if limit == 0 {
		limit = DefaultMaxExamples
	}
	for _, p := range o.Examples {
		if len(ps.Examples) < limit {
			ps.Examples = append(ps.Examples, p)
		}
	}
}
