package data

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/memtrain/memtrain/internal/inputfile"
)

// A Document is one record of the input: a JSONL line, a Parquet row, a text
// file or one paragraph of it.
type Document struct {
	// Source is the path of the file the document came from.
	Source string
	// Line is the 1-based line of a JSONL record or of the first line of a
	// text document, or the 1-based row of a Parquet record (counted over
	// the whole file, as lines are; pandas' iloc is Line-1).
	Line int64
	// Text is the document's text, valid UTF-8. It is empty for a
	// pre-tokenized document.
	Text string
	// IDs are the token ids of a pre-tokenized document; nil for text.
	IDs []int32
	// Split, when set, puts the document in that split of a dataset
	// (StoreWriter.Add) instead of the hash-based choice: what a
	// memorization study needs to say exactly which texts are trained on.
	// Readers leave it empty.
	Split Split
	// Messages is the conversation of a chat record (ReadOptions.Chat),
	// which Prepare renders into IDs and Mask.
	Messages []Message
	// Mask is the loss mask of a chat document's IDs: 1 for a token of an
	// assistant turn, 0 for the prompt. nil for other documents.
	Mask []uint8
	// chatErr is why Prepare could not render Messages; encodeErr why the
	// tokenizer could not encode Text.
	chatErr, encodeErr string
	// pretokenized marks, in Prepare, a document whose IDs were read, not
	// encoded.
	pretokenized bool
}

// A Format is an input file format.
type Format string

// The input formats.
const (
	Auto    Format = "auto"    // by file extension
	JSONL   Format = "jsonl"   // JSON Lines: .jsonl, .ndjson
	Parquet Format = "parquet" // Apache Parquet: .parquet, .pq
	Text    Format = "text"    // plain UTF-8 text: .txt, .md
)

// ParseFormat returns the format named s ("" is Auto).
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case "", Auto:
		return Auto, nil
	case JSONL, Parquet, Text:
		return f, nil
	}
	return "", fmt.Errorf("data: unknown format %q (want auto, jsonl, parquet or text)", s)
}

// FormatOf returns the format that a file's extension names, or Auto when
// it names none.
func FormatOf(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".ndjson":
		return JSONL
	case ".parquet", ".pq":
		return Parquet
	case ".txt", ".md":
		return Text
	}
	return Auto
}

// DefaultMaxLineBytes bounds a JSONL or text line when
// ReadOptions.MaxLineBytes is 0.
const DefaultMaxLineBytes = 256 << 20

// ReadOptions control a Reader.
type ReadOptions struct {
	// Format is the format of every input file. Auto (or "") takes each
	// file's format from its extension (see FormatOf).
	Format Format

	// Field is the JSONL field or the Parquet column that holds the text:
	// "text" when empty, or "input_ids" when Pretokenized. Only top-level
	// fields are read.
	Field string

	// Pretokenized reads token ids instead of text: a JSON array of
	// integers, or a Parquet list (or repeated column) of INT32 or INT64.
	Pretokenized bool

	// IDsOrText reads each JSONL record as pre-tokenized when it has an
	// "input_ids" field and as text (Field) otherwise, so that one file
	// may mix the two: the documents that evaluation commands score.
	// Other formats read text.
	IDsOrText bool

	// Chat reads chat records (see ParseChatRecord) from JSONL and
	// Parquet: Document.Messages, which Prepare renders. Text files are
	// skipped in folders and refused when named.
	Chat bool

	// VocabSize, when positive, bounds pre-tokenized ids: an id outside
	// [0, VocabSize) makes the record a BadToken problem.
	VocabSize int

	// Paragraphs splits text files into one document per paragraph, a run
	// of lines between blank (or white-space) lines. Otherwise each text
	// file is one document, kept byte for byte.
	Paragraphs bool

	// Strict makes the first problem an error (a *RecordError) instead of
	// a skipped and counted record.
	Strict bool

	// MaxLineBytes bounds a JSONL or text line (0: DefaultMaxLineBytes).
	// Longer lines are LineTooLong problems.
	MaxLineBytes int

	// MaxExamples is how many problems Problems keeps as examples
	// (0: DefaultMaxExamples).
	MaxExamples int

	// Progress, if set, is called with the number of input bytes consumed
	// since its last call, from the goroutine that calls Next.
	Progress func(n int64)
}

func (o *ReadOptions) field() string {
	switch {
	case o.Field != "":
		return o.Field
	case o.Pretokenized:
		return "input_ids"
	}
	return "text"
}

func (o *ReadOptions) maxLine() int {
	if o.MaxLineBytes > 0 {
		return o.MaxLineBytes
	}
	return DefaultMaxLineBytes
}

// A Source is one input file and what was read from it.
type Source struct {
	Path   string `json:"path"`
	Format Format `json:"format"`
	Bytes  int64  `json:"bytes"`
	// SHA256 is the file's SHA-256 in hexadecimal, set once the file has
	// been read to its end.
	SHA256    string `json:"sha256"`
	Documents int64  `json:"documents"`
	Problems  int64  `json:"problems"`
}

// fileReader reads the documents of one file.
type fileReader interface {
	// next returns the next document or io.EOF. Bad records go to report,
	// which returns an error in strict mode.
	next() (Document, error)
	// sum returns the file's SHA-256 once it has been read to the end.
	sum() string
	close() error
}

// A Reader reads documents from files and folders, in order. Folders are
// walked recursively in lexical order, skipping entries whose names begin
// with "."; with Format Auto the files whose extension names a format are
// read and the others are reported as SkippedFile problems, and with an
// explicit Format every regular file is read in that format; what is not a
// regular file (a named pipe, a device, a socket) is a SkippedFile problem,
// and an error when named directly, so that nothing blocks on it.
type Reader struct {
	opt      ReadOptions
	sources  []Source
	size     int64
	cur      int // index of the source being read
	fr       fileReader
	problems Problems
	err      error // sticky
}

// NewReader plans the reading of paths, files or folders. It fails if a path
// does not exist, if the format of a file named directly cannot be told, or
// if a folder holds no input file.
func NewReader(paths []string, opt ReadOptions) (*Reader, error) {
	format, err := ParseFormat(string(opt.Format))
	if err != nil {
		return nil, err
	}
	opt.Format = format
	if opt.Pretokenized && format == Text {
		return nil, errors.New("data: text files hold no token ids; pre-tokenized input must be JSONL or Parquet")
	}
	if opt.Chat {
		switch {
		case format == Text:
			return nil, errors.New("data: text files hold no conversations; chat input must be JSONL or Parquet")
		case opt.Pretokenized || opt.IDsOrText:
			return nil, errors.New("data: chat records are text; they cannot be pre-tokenized")
		case opt.Field != "":
			return nil, fmt.Errorf("data: field %q: chat records have fixed fields (messages, or instruction/input/output)", opt.Field)
		}
	}
	if len(paths) == 0 {
		return nil, errors.New("data: no input files")
	}
	r := &Reader{opt: opt}
	r.problems.MaxExamples = opt.MaxExamples
	for _, p := range paths {
		if err := r.plan(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *Reader) plan(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if !st.IsDir() {
		if err := inputfile.Check(path, st.Mode()); err != nil {
			return fmt.Errorf("data: %w", err)
		}
		f := r.opt.Format
		if f == Auto {
			if f = FormatOf(path); f == Auto {
				return fmt.Errorf("data: %s: cannot tell the format from the extension (want .jsonl, .ndjson, .parquet, .pq, .txt or .md, or give the format)", path)
			}
		}
		return r.add(path, f, st.Size())
	}
	n := len(r.sources)
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != path && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := os.Stat(p) // follows symbolic links
		if err != nil {
			return err
		}
		if info.IsDir() {
			return nil // a link to a folder, which the walk does not follow
		}
		if !info.Mode().IsRegular() {
			// A named pipe would block the read until something wrote to it.
			return r.report(Problem{Source: p, Kind: SkippedFile,
				Detail: "skipped: not a regular file (" + inputfile.Kind(info.Mode()) + ")"})
		}
		f := r.opt.Format
		if f == Auto {
			if f = FormatOf(p); f == Auto {
				return r.report(Problem{Source: p, Kind: SkippedFile,
					Detail: "skipped: the extension names no input format"})
			}
		}
		if r.opt.Pretokenized && f == Text {
			return r.report(Problem{Source: p, Kind: SkippedFile,
				Detail: "skipped: a text file holds no token ids"})
		}
		if r.opt.Chat && f == Text {
			return r.report(Problem{Source: p, Kind: SkippedFile,
				Detail: "skipped: a text file holds no chat records"})
		}
		return r.add(p, f, info.Size())
	})
	if err != nil {
		var re *RecordError
		if errors.As(err, &re) {
			return err
		}
		return fmt.Errorf("data: %w", err)
	}
	if len(r.sources) == n {
		return fmt.Errorf("data: folder %s holds no input files", path)
	}
	return nil
}

func (r *Reader) add(path string, f Format, size int64) error {
	if r.opt.Pretokenized && f == Text {
		return fmt.Errorf("data: %s: a text file holds no token ids", path)
	}
	if r.opt.Chat && f == Text {
		return fmt.Errorf("data: %s: a text file holds no chat records (want JSONL or Parquet)", path)
	}
	r.sources = append(r.sources, Source{Path: path, Format: f, Bytes: size})
	r.size += size
	return nil
}

// report records a problem; in strict mode it returns it as an error.
func (r *Reader) report(p Problem) error {
	r.problems.Add(p)
	if r.cur < len(r.sources) && p.Source == r.sources[r.cur].Path {
		r.sources[r.cur].Problems++
	}
	if r.opt.Strict {
		return &RecordError{p}
	}
	return nil
}

func (r *Reader) progress(n int64) {
	if r.opt.Progress != nil && n > 0 {
		r.opt.Progress(n)
	}
}

// Next returns the next document, or io.EOF after the last one. Records that
// do not make a document are counted in Problems and skipped, or, in strict
// mode, returned as a *RecordError. An error is final: later calls return it
// again.
func (r *Reader) Next() (Document, error) {
	if r.err != nil {
		return Document{}, r.err
	}
	for r.cur < len(r.sources) {
		if r.fr == nil {
			fr, err := r.open(&r.sources[r.cur])
			if err != nil {
				r.err = err
				return Document{}, err
			}
			r.fr = fr
		}
		doc, err := r.fr.next()
		if err == nil {
			r.sources[r.cur].Documents++
			return doc, nil
		}
		if err != io.EOF {
			r.err = err
			return Document{}, err
		}
		r.sources[r.cur].SHA256 = r.fr.sum()
		err = r.fr.close()
		r.fr = nil
		if err != nil {
			r.err = fmt.Errorf("data: %s: %w", r.sources[r.cur].Path, err)
			return Document{}, r.err
		}
		r.cur++
	}
	r.err = io.EOF
	return Document{}, io.EOF
}

func (r *Reader) open(src *Source) (fileReader, error) {
	switch src.Format {
	case JSONL:
		f, h, err := r.openStream(src.Path)
		if err != nil {
			return nil, err
		}
		return newJSONLReader(src.Path, f, h, &r.opt, r.report), nil
	case Text:
		f, h, err := r.openStream(src.Path)
		if err != nil {
			return nil, err
		}
		return newTextReader(src.Path, f, h, &r.opt, r.report), nil
	case Parquet:
		if r.opt.Chat {
			return openParquetChat(src.Path, &r.opt, r.report)
		}
		return openParquet(src.Path, &r.opt, r.report)
	}
	return nil, fmt.Errorf("data: %s: unknown format %q", src.Path, src.Format)
}

// hashedFile is a file read through a SHA-256 and the progress callback.
type hashedFile struct {
	f        *os.File
	h        hash.Hash
	progress func(int64)
}

func (r *Reader) openStream(path string) (*hashedFile, hash.Hash, error) {
	f, err := inputfile.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	h := sha256.New()
	return &hashedFile{f: f, h: h, progress: r.progress}, h, nil
}

func (hf *hashedFile) Read(p []byte) (int, error) {
	n, err := hf.f.Read(p)
	hf.h.Write(p[:n])
	hf.progress(int64(n))
	return n, err
}

func (hf *hashedFile) Close() error { return hf.f.Close() }

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// Problems returns the problems met so far.
func (r *Reader) Problems() *Problems { return &r.problems }

// Sources returns the input files, in reading order, with what has been
// read from them so far.
func (r *Reader) Sources() []Source { return append([]Source(nil), r.sources...) }

// Size returns the total size of the input files in bytes.
func (r *Reader) Size() int64 { return r.size }

// Close closes the file being read.
func (r *Reader) Close() error {
	if r.fr == nil {
		return nil
	}
	err := r.fr.close()
	r.fr = nil
	if r.err == nil {
		r.err = errors.New("data: reader closed")
	}
	return err
}
