package memorization

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/inputfile"
)

// StoreDocuments returns the documents of a prepared dataset: its train
// split as members, its holdout split as non-members, or both (split "",
// "both"). A trailing EOS that the dataset appended is removed, so that a
// document is BOS + its text, as the goldfish protocol evaluates it. A chat
// dataset's documents carry their loss mask (Document.Mask), less the
// removed EOS's.
func StoreDocuments(s *data.Store, split string) ([]Document, error) {
	want := map[data.Split]bool{}
	switch split {
	case "", "both":
		want[data.Train], want[data.Holdout] = true, true
	case string(data.Train), string(data.Holdout):
		want[data.Split(split)] = true
	default:
		return nil, fmt.Errorf("memorization: split %q (want train, holdout or both)", split)
	}
	set := s.Manifest().Settings
	eos := s.Manifest().Tokenizer.EOS
	var docs []Document
	for id := range s.NumDocuments() {
		info, err := s.Doc(id)
		if err != nil {
			return nil, err
		}
		if !want[info.Split] {
			continue
		}
		ids, err := s.DocTokens(id)
		if err != nil {
			return nil, err
		}
		mask, err := s.DocMask(id)
		if err != nil {
			return nil, err
		}
		if set.EOS && len(ids) > 0 && ids[len(ids)-1] == eos {
			ids = ids[:len(ids)-1]
			if mask != nil {
				mask = mask[:len(ids)]
			}
		}
		docs = append(docs, Document{ID: id, Member: info.Split == data.Train, Source: info.Source, Line: info.Line, IDs: ids, Mask: mask})
	}
	return docs, nil
}

// DocumentSource says where an evaluation's documents come from: a
// dataset folder's splits, or input files of members and of non-members.
type DocumentSource struct {
	Data       []string // one dataset folder, or input files of members
	NonMembers []string // input files of non-members (with input files)
	Split      string   // with a dataset: train, holdout or both ("": both)
	Strict     bool     // a bad record is an error, not a skipped one
	Limit      int      // at most this many members and as many non-members (0: all)
	// Chat asks for conversations with their loss mask (the chat
	// protocol): Data must be a chat dataset (memtrain data prepare
	// --chat).
	Chat bool
}

// A UsageError is an option given with the wrong kind of source.
type UsageError struct {
	Option string // "non-members", "split"
	Goes   string // what it goes with
}

func (e *UsageError) Error() string {
	return fmt.Sprintf("memorization: %s goes with %s", e.Option, e.Goes)
}

// IsDataset says whether path is a prepared dataset folder.
func IsDataset(path string) bool {
	st, err := os.Stat(filepath.Join(path, "manifest.json"))
	return err == nil && st.Mode().IsRegular()
}

// LoadDocuments reads the documents of src: a dataset's splits (tok, if
// not nil, must be the dataset's tokenizer), or input files tokenized
// with tok, members then non-members; then keeps the first Limit of each.
func LoadDocuments(src DocumentSource, tok *tokenizer.Tokenizer) ([]Document, error) {
	var docs []Document
	if len(src.Data) == 1 && IsDataset(src.Data[0]) {
		if len(src.NonMembers) > 0 {
			return nil, &UsageError{"non-members", "input files; a dataset has its own holdout split"}
		}
		s, err := data.OpenStore(src.Data[0])
		if err != nil {
			return nil, err
		}
		defer s.Close()
		if src.Chat && !s.HasMask() {
			return nil, fmt.Errorf("memorization: the chat protocol needs a chat dataset (memtrain data prepare --chat): %s has no loss mask", src.Data[0])
		}
		if tok != nil && s.Manifest().Tokenizer.SHA256 != tok.Hash() {
			return nil, fmt.Errorf("memorization: %s was tokenized with another tokenizer than the model's", src.Data[0])
		}
		if docs, err = StoreDocuments(s, src.Split); err != nil {
			return nil, err
		}
	} else {
		if src.Chat {
			return nil, fmt.Errorf("memorization: the chat protocol reads a chat dataset (memtrain data prepare --chat), not input files: %s", strings.Join(src.Data, ", "))
		}
		if src.Split != "" && src.Split != "both" {
			return nil, &UsageError{"split", "a dataset folder; input files are members and non-members non-members"}
		}
		var err error
		if docs, _, err = FileDocuments(src.Data, tok, true, data.ReadOptions{Strict: src.Strict}); err != nil {
			return nil, err
		}
		if len(src.NonMembers) > 0 {
			non, _, err := FileDocuments(src.NonMembers, tok, false, data.ReadOptions{Strict: src.Strict})
			if err != nil {
				return nil, err
			}
			docs = append(docs, non...)
		}
	}
	if src.Limit > 0 {
		docs = limitDocuments(docs, src.Limit)
	}
	return docs, nil
}

// limitDocuments keeps the first n members and the first n non-members.
func limitDocuments(docs []Document, n int) []Document {
	var out []Document
	var members, non int
	for _, d := range docs {
		if d.Member && members < n {
			members++
			out = append(out, d)
		} else if !d.Member && non < n {
			non++
			out = append(out, d)
		}
	}
	return out
}

// FileDocuments reads documents from input files (JSONL, Parquet, text or
// folders, as data.NewReader reads them), tokenizing text with tok and BOS
// (pre-tokenized ids are taken as they are). Every document gets the
// membership member. Skipped records are counted in the returned problems
// (or, with opt.Strict, are an error).
func FileDocuments(paths []string, tok *tokenizer.Tokenizer, member bool, opt data.ReadOptions) ([]Document, *data.Problems, error) {
	read, problems, err := data.ReadTokenized(paths, tok, true, opt)
	if err != nil {
		return nil, nil, err
	}
	docs := make([]Document, len(read))
	for i, d := range read {
		docs[i] = Document{ID: i, Member: member, Source: d.Source, Line: d.Line, IDs: d.IDs}
	}
	return docs, problems, nil
}

// The files of an evaluation folder.
const (
	SummaryFileName = "summary.json"
	DocsFileName    = "docs.jsonl"
)

// WriteResults writes an evaluation into dir: summary.json and docs.jsonl
// (one DocResult a line), each complete or absent — written to a temporary
// name and renamed.
func WriteResults(dir string, s *Summary, docs []DocResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("memorization: %w", err)
	}
	summary, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("memorization: %w", err)
	}
	docsPath := filepath.Join(dir, DocsFileName)
	err = atomicfile.Write(docsPath, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for i := range docs {
			if err := enc.Encode(&docs[i]); err != nil {
				return fmt.Errorf("memorization: writing %s: %w", docsPath, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, SummaryFileName), append(summary, '\n'))
}

// ReadSummary reads a summary.json.
func ReadSummary(path string) (*Summary, error) {
	b, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("memorization: %w", err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("memorization: %s: %w", path, err)
	}
	if s.Schema != SummarySchema {
		return nil, fmt.Errorf("memorization: %s: schema %d, want %d", path, s.Schema, SummarySchema)
	}
	return &s, nil
}
