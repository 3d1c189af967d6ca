package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"unsafe"

	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/inputfile"
)

// The files of a dataset folder.
const (
	TokensFile   = "tokens.bin"
	IndexFile    = "index.bin"
	ManifestFile = "manifest.json"
	// MaskFile holds the loss mask of a chat dataset (Settings.Chat): one
	// byte per token, 1 where the token is a target of the loss.
	MaskFile = "mask.bin"
)

// StoreVersion is the version of the dataset format that this package
// writes and reads.
const StoreVersion = 1

// MaskedVersion is the manifest version of a dataset with a loss mask
// (mask.bin, Settings.Chat); its tokens.bin and index.bin are those of
// StoreVersion. A plain dataset's manifest keeps StoreVersion, so that
// datasets made before masks open as they did, and a masked one names a
// version that readers without masks refuse rather than train on its
// prompts.
const MaskedVersion = 2

const (
	manifestFormat = "memtrain-dataset"
	tokensMagic    = "MTTOKENS"
	indexMagic     = "MTINDEX\x00"
	maskMagic      = "MTMASK\x00\x00"
	headerSize     = 64
	recordSize     = 32
	dtypeUint32    = 1 // the only token dtype: little-endian uint32
)

// A Mode is the way documents become training sequences.
type Mode string

// The sequence modes.
const (
	// ModePack concatenates the documents of a split and cuts the stream
	// into windows of SeqLen+1 tokens that start every SeqLen tokens, so
	// that consecutive windows share one token and every token but the
	// first is a target exactly once. The last window is padded.
	ModePack Mode = "pack"
	// ModeDocument makes each document one sequence: its first SeqLen+1
	// tokens, padded. Tokens beyond are dropped and counted.
	ModeDocument Mode = "document"
)

// ParseMode returns the mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModePack, ModeDocument:
		return m, nil
	}
	return "", fmt.Errorf("data: unknown mode %q (want pack or document)", s)
}

// A Split is a part of a dataset: the documents to train on, or those held
// out.
type Split string

// The splits. The zero value of a LoaderConfig's Split means Train.
const (
	Train   Split = "train"
	Holdout Split = "holdout"
)

func (s Split) index() (int, error) {
	switch s {
	case "", Train:
		return 0, nil
	case Holdout:
		return 1, nil
	}
	return 0, fmt.Errorf("data: unknown split %q (want train or holdout)", s)
}

// TokenizerInfo identifies the tokenizer that made a dataset.
type TokenizerInfo struct {
	SHA256    string `json:"sha256"` // of tokenizer.json
	VocabSize int    `json:"vocab_size"`
	Family    string `json:"family,omitempty"`
	BOS       int32  `json:"bos"` // -1: none
	EOS       int32  `json:"eos"` // -1: none
}

// TokenizerInfoOf describes tok.
func TokenizerInfoOf(tok *tokenizer.Tokenizer) TokenizerInfo {
	info := TokenizerInfo{SHA256: tok.Hash(), VocabSize: tok.VocabSize(), Family: tok.Family(), BOS: -1, EOS: -1}
	if id, ok := tok.BOS(); ok {
		info.BOS = id
	}
	if id, ok := tok.EOS(); ok {
		info.EOS = id
	}
	return info
}

// Settings are how a dataset was made.
type Settings struct {
	Mode   Mode `json:"mode"`
	SeqLen int  `json:"seq_len"` // tokens per training sequence (inputs)
	BOS    bool `json:"bos"`     // each document starts with the BOS token
	EOS    bool `json:"eos"`     // each document ends with the EOS token
	// PadID fills the padding of inputs and targets (whose weights are 0):
	// the EOS token, or 0 if the tokenizer has none. CreateStore sets it.
	PadID int32 `json:"pad_id"`
	// Holdout is the fraction of documents held out, chosen by SHA-256 of
	// the seed (8 bytes, little-endian) and the document's text (or its
	// ids, 4 bytes each little-endian, when pre-tokenized or rendered from
	// a conversation): a document is
	// held out when the first 8 bytes of the hash, as a big-endian
	// integer, are below Holdout×2⁶⁴. The choice depends on nothing else,
	// so it is stable under reordering, and equal texts share a split.
	Holdout float64 `json:"holdout"`
	Seed    uint64  `json:"seed"`
	// How the inputs were read (recorded by Prepare).
	Format       Format `json:"format,omitempty"`
	Field        string `json:"field,omitempty"`
	Pretokenized bool   `json:"pretokenized,omitempty"`
	Paragraphs   bool   `json:"paragraphs,omitempty"`
	SplitSpecial bool   `json:"split_special,omitempty"`
	// Chat is set for a dataset of conversations, whose loss is on the
	// assistant tokens only (mask.bin).
	Chat *ChatSettings `json:"chat,omitempty"`
}

// ChatSettings are how a chat dataset's conversations were rendered.
type ChatSettings struct {
	// Template names the chat template: "tokenizer_config.json",
	// "builtin:llama2", "builtin:llama3" or "custom".
	Template string `json:"template"`
	// TemplateSHA256 is the SHA-256 of its Jinja source.
	TemplateSHA256 string `json:"template_sha256"`
	// Date is strftime_now's fixed date (YYYY-MM-DD), when one was given.
	Date string `json:"date,omitempty"`
}

func (s *Settings) check() error {
	if _, err := ParseMode(string(s.Mode)); err != nil {
		return err
	}
	if s.SeqLen < 1 || s.SeqLen > 1<<24 {
		return fmt.Errorf("data: seq_len %d out of range [1, %d]", s.SeqLen, 1<<24)
	}
	if !(s.Holdout >= 0 && s.Holdout <= 1) {
		return fmt.Errorf("data: holdout %v out of range [0, 1]", s.Holdout)
	}
	return nil
}

// Counts are the sizes of a dataset or of one of its splits.
type Counts struct {
	Documents int64 `json:"documents"`
	Tokens    int64 `json:"tokens"` // BOS and EOS included
	Sequences int64 `json:"sequences"`
	// Targets is the number of target positions with weight 1, and
	// Padding the number of padding positions, with weight 0. Masked
	// (chat datasets) is the number of target positions whose token the
	// loss mask excludes, a prompt's, with weight 0 too: Targets + Masked
	// + Padding = Sequences × SeqLen.
	Targets int64 `json:"targets"`
	Padding int64 `json:"padding"`
	Masked  int64 `json:"masked,omitempty"`
	// TruncatedDocuments (ModeDocument) are the documents longer than
	// SeqLen+1 tokens, and TruncatedTokens the tokens they lost.
	TruncatedDocuments int64 `json:"truncated_documents"`
	TruncatedTokens    int64 `json:"truncated_tokens"`
}

func (c *Counts) add(d Counts) {
	c.Documents += d.Documents
	c.Tokens += d.Tokens
	c.Sequences += d.Sequences
	c.Targets += d.Targets
	c.Padding += d.Padding
	c.Masked += d.Masked
	c.TruncatedDocuments += d.TruncatedDocuments
	c.TruncatedTokens += d.TruncatedTokens
}

// SplitInfo describes one split.
type SplitInfo struct {
	Counts
	// DocIDs lists the split's document ids as half-open ranges
	// [first, last+1), in order.
	DocIDs [][2]int64 `json:"doc_ids"`
}

// Splits describes the two splits.
type Splits struct {
	Train   SplitInfo `json:"train"`
	Holdout SplitInfo `json:"holdout"`
}

// FileInfo is the size and SHA-256 of a file of the dataset.
type FileInfo struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// A Manifest describes a dataset: it is manifest.json.
type Manifest struct {
	Format    string              `json:"format"` // "memtrain-dataset"
	Version   int                 `json:"version"`
	DType     string              `json:"dtype"` // of tokens.bin: "uint32"
	Tokenizer TokenizerInfo       `json:"tokenizer"`
	Settings  Settings            `json:"settings"`
	Counts    Counts              `json:"counts"`
	Splits    Splits              `json:"splits"`
	Sources   []Source            `json:"sources"`
	Files     map[string]FileInfo `json:"files"`
	Problems  Problems            `json:"problems"`
}

// Split returns the information of a split.
func (m *Manifest) Split(s Split) (*SplitInfo, error) {
	i, err := s.index()
	if err != nil {
		return nil, err
	}
	if i == 1 {
		return &m.Splits.Holdout, nil
	}
	return &m.Splits.Train, nil
}

// record is one document of index.bin.
type record struct {
	offset int64  // first token, in tokens from the start of the payload
	length uint32 // tokens
	source uint32 // index into Manifest.Sources
	line   int64
	split  uint8 // 0 train, 1 holdout
}

func (r *record) put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], uint64(r.offset))
	binary.LittleEndian.PutUint32(b[8:], r.length)
	binary.LittleEndian.PutUint32(b[12:], r.source)
	binary.LittleEndian.PutUint64(b[16:], uint64(r.line))
	b[24] = r.split
	clear(b[25:recordSize])
}

func getRecord(b []byte) record {
	return record{
		offset: int64(binary.LittleEndian.Uint64(b[0:])),
		length: binary.LittleEndian.Uint32(b[8:]),
		source: binary.LittleEndian.Uint32(b[12:]),
		line:   int64(binary.LittleEndian.Uint64(b[16:])),
		split:  b[24],
	}
}

// tokensHeader returns the header of tokens.bin.
func tokensHeader(tokens, docs int64) []byte {
	h := make([]byte, headerSize)
	copy(h, tokensMagic)
	binary.LittleEndian.PutUint32(h[8:], StoreVersion)
	binary.LittleEndian.PutUint32(h[12:], dtypeUint32)
	binary.LittleEndian.PutUint32(h[16:], headerSize)
	binary.LittleEndian.PutUint32(h[20:], 4)
	binary.LittleEndian.PutUint64(h[24:], uint64(tokens))
	binary.LittleEndian.PutUint64(h[32:], uint64(docs))
	return h
}

// indexBytes returns index.bin.
func indexBytes(recs []record, tokens int64) []byte {
	b := make([]byte, headerSize+recordSize*len(recs))
	copy(b, indexMagic)
	binary.LittleEndian.PutUint32(b[8:], StoreVersion)
	binary.LittleEndian.PutUint32(b[12:], recordSize)
	binary.LittleEndian.PutUint32(b[16:], headerSize)
	binary.LittleEndian.PutUint64(b[24:], uint64(len(recs)))
	binary.LittleEndian.PutUint64(b[32:], uint64(tokens))
	for i := range recs {
		recs[i].put(b[headerSize+recordSize*i:])
	}
	return b
}

// splitView is the sequences of one split.
type splitView struct {
	docs   []int   // document ids, in order
	start  []int64 // ModePack: offset of each document in the split's stream; len(docs)+1
	counts Counts
}

// views computes the sequences of both splits. mask is the loss mask of
// every token, or nil for none.
func views(recs []record, set Settings, mask []uint8) [2]splitView {
	var v [2]splitView
	T := int64(set.SeqLen)
	// masked counts the tokens of mask[from:to] that the mask excludes.
	masked := func(from, to int64) int64 {
		if mask == nil {
			return 0
		}
		var n int64
		for _, b := range mask[from:to] {
			if b == 0 {
				n++
			}
		}
		return n
	}
	var firstMasked [2]int64 // whether the first token of a split is masked
	var seen [2]bool
	for id, r := range recs {
		s := &v[r.split]
		s.docs = append(s.docs, id)
		s.counts.Documents++
		s.counts.Tokens += int64(r.length)
		if set.Mode == ModePack {
			s.counts.Masked += masked(r.offset, r.offset+int64(r.length))
			if !seen[r.split] {
				seen[r.split] = true
				firstMasked[r.split] = masked(r.offset, r.offset+1)
			}
		}
		if set.Mode == ModeDocument {
			L := int64(r.length)
			s.counts.Sequences++
			targets := min(L, T+1) - 1
			m := masked(r.offset+1, r.offset+1+targets)
			s.counts.Targets += targets - m
			s.counts.Masked += m
			s.counts.Padding += T - targets
			if L > T+1 {
				s.counts.TruncatedDocuments++
				s.counts.TruncatedTokens += L - (T + 1)
			}
		}
	}
	if set.Mode == ModePack {
		for i := range v {
			s := &v[i]
			s.start = make([]int64, len(s.docs)+1)
			for j, id := range s.docs {
				s.start[j+1] = s.start[j] + int64(recs[id].length)
			}
			// The first token of the split's stream is no target.
			s.counts.Masked -= firstMasked[i]
			if n := s.counts.Tokens; n >= 2 {
				s.counts.Sequences = (n - 1 + T - 1) / T
				s.counts.Targets = n - 1 - s.counts.Masked
				s.counts.Padding = s.counts.Sequences*T - (n - 1)
			} else {
				s.counts.Masked = 0
			}
		}
	}
	return v
}

// docRanges returns ids as half-open ranges.
func docRanges(ids []int) [][2]int64 {
	out := [][2]int64{}
	for _, id := range ids {
		if n := len(out); n > 0 && out[n-1][1] == int64(id) {
			out[n-1][1]++
		} else {
			out = append(out, [2]int64{int64(id), int64(id) + 1})
		}
	}
	return out
}

// A Store is an open dataset: the tokens of its documents, memory-mapped
// where the system allows, and its sequences. It is safe for concurrent
// use, until Close.
type Store struct {
	dir    string
	m      Manifest
	raw    []byte // all of tokens.bin
	unmap  func() error
	tokens []uint32 // the payload of tokens.bin
	mask   []uint8  // the payload of mask.bin; nil for a dataset without
	munmap func() error
	recs   []record
	views  [2]splitView
	closed bool
}

// OpenStore opens the dataset in dir and verifies it: the manifest's format
// and version, the headers of tokens.bin and index.bin (magic, version,
// dtype, counts against the file sizes), their SHA-256 checksums, that the
// documents tile the tokens, that every token is in the vocabulary and that
// the counts agree with the manifest. Errors name the file at fault.
func OpenStore(dir string) (*Store, error) {
	// A file or a missing path named as a dataset: say what a dataset is
	// rather than that dir/manifest.json is "not a directory".
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("data: dataset %s: no such folder (a dataset is the folder data prepare makes from input files)", dir)
	case err == nil && !fi.IsDir():
		return nil, fmt.Errorf("data: dataset %s is a file, not a dataset folder: prepare a dataset from it with data prepare and give that folder", dir)
	}
	s := &Store{dir: dir}
	if err := s.open(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) path(name string) string { return filepath.Join(s.dir, name) }

func (s *Store) errorf(name, format string, args ...any) error {
	return fmt.Errorf("data: %s: %s", s.path(name), fmt.Sprintf(format, args...))
}

func (s *Store) open() error {
	b, err := inputfile.ReadFile(s.path(ManifestFile))
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&s.m); err != nil {
		return s.errorf(ManifestFile, "invalid JSON: %v", err)
	}
	m := &s.m
	switch {
	case m.Format != manifestFormat:
		return s.errorf(ManifestFile, "format %q, want %q", m.Format, manifestFormat)
	case m.Version != StoreVersion && m.Version != MaskedVersion:
		return s.errorf(ManifestFile, "version %d is not supported (want %d, or %d with a loss mask)", m.Version, StoreVersion, MaskedVersion)
	case m.Version == MaskedVersion && m.Settings.Chat == nil:
		return s.errorf(ManifestFile, "version %d (a loss mask) but settings.chat is missing", m.Version)
	case m.Version == StoreVersion && m.Settings.Chat != nil:
		return s.errorf(ManifestFile, "settings.chat is set but version %d has no loss mask (want %d)", m.Version, MaskedVersion)
	case m.DType != "uint32":
		return s.errorf(ManifestFile, "dtype %q is not supported (want uint32)", m.DType)
	case m.Tokenizer.VocabSize <= 0:
		return s.errorf(ManifestFile, "tokenizer.vocab_size %d, want > 0", m.Tokenizer.VocabSize)
	}
	if err := m.Settings.check(); err != nil {
		return s.errorf(ManifestFile, "settings: %v", err)
	}
	if err := s.openIndex(); err != nil {
		return err
	}
	if err := s.openTokens(); err != nil {
		return err
	}
	if m.Version == MaskedVersion {
		if err := s.openMask(); err != nil {
			return err
		}
	}
	// The documents tile the tokens, in order.
	var off int64
	for id, r := range s.recs {
		if r.offset != off {
			return s.errorf(IndexFile, "document %d starts at token %d, want %d", id, r.offset, off)
		}
		if r.length == 0 {
			return s.errorf(IndexFile, "document %d is empty", id)
		}
		if r.split > 1 {
			return s.errorf(IndexFile, "document %d: split %d, want 0 or 1", id, r.split)
		}
		if int(r.source) >= len(m.Sources) {
			return s.errorf(IndexFile, "document %d: source %d, but the manifest lists %d", id, r.source, len(m.Sources))
		}
		off += int64(r.length)
	}
	if off != int64(len(s.tokens)) {
		return s.errorf(IndexFile, "documents hold %d tokens, tokens.bin %d", off, len(s.tokens))
	}
	vocab := uint32(m.Tokenizer.VocabSize)
	for i, t := range s.tokens {
		if t >= vocab {
			return s.errorf(TokensFile, "token %d at position %d outside the vocabulary [0, %d)", t, i, vocab)
		}
	}
	s.views = views(s.recs, m.Settings, s.mask)
	var total Counts
	for i, name := range []Split{Train, Holdout} {
		si, _ := m.Split(name)
		got := s.views[i].counts
		total.add(got)
		if si.Counts != got {
			return s.errorf(ManifestFile, "splits.%s counts %+v disagree with index.bin (%+v)", name, si.Counts, got)
		}
		if want := docRanges(s.views[i].docs); !slices.Equal(si.DocIDs, want) {
			return s.errorf(ManifestFile, "splits.%s.doc_ids disagree with index.bin", name)
		}
	}
	if m.Counts != total {
		return s.errorf(ManifestFile, "counts %+v disagree with index.bin (%+v)", m.Counts, total)
	}
	return nil
}

// Tokenizer is the tokenizer the dataset carries (StoreWriter.AddTokenizer:
// data prepare stores it), checked against the manifest; nil, with no
// error, for a dataset made without one.
func (s *Store) Tokenizer() (*tokenizer.Tokenizer, error) {
	if _, ok := s.m.Files[tokenizer.FileName]; !ok {
		return nil, nil
	}
	read := func(name string) ([]byte, error) {
		if _, ok := s.m.Files[name]; !ok {
			return nil, nil
		}
		b, err := inputfile.ReadFile(s.path(name))
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		return b, s.checkFile(name, b)
	}
	tj, err := read(tokenizer.FileName)
	if err != nil {
		return nil, err
	}
	cj, err := read(tokenizer.ConfigFileName)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Parse(s.path(tokenizer.FileName), tj, cj)
	if err != nil {
		return nil, err
	}
	if tok.Hash() != s.m.Tokenizer.SHA256 {
		return nil, s.errorf(tokenizer.FileName, "sha256 %s, but the tokens were made with %s", tok.Hash(), s.m.Tokenizer.SHA256)
	}
	return tok, nil
}

// checkFile compares a file's size and checksum with the manifest's.
func (s *Store) checkFile(name string, b []byte) error {
	fi, ok := s.m.Files[name]
	if !ok {
		return s.errorf(ManifestFile, "files has no %q entry", name)
	}
	if int64(len(b)) != fi.Bytes {
		return s.errorf(name, "%d bytes, but the manifest says %d (truncated or replaced)", len(b), fi.Bytes)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != fi.SHA256 {
		return s.errorf(name, "checksum mismatch: sha256 %s, the manifest says %s", got, fi.SHA256)
	}
	return nil
}

func (s *Store) openIndex() error {
	b, err := inputfile.ReadFile(s.path(IndexFile))
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if len(b) < headerSize {
		return s.errorf(IndexFile, "truncated: %d bytes, shorter than the %d-byte header", len(b), headerSize)
	}
	switch {
	case string(b[:8]) != indexMagic:
		return s.errorf(IndexFile, "not a memtrain index (bad magic %q)", b[:8])
	case binary.LittleEndian.Uint32(b[8:]) != StoreVersion:
		return s.errorf(IndexFile, "version %d is not supported (want %d)", binary.LittleEndian.Uint32(b[8:]), StoreVersion)
	case binary.LittleEndian.Uint32(b[12:]) != recordSize || binary.LittleEndian.Uint32(b[16:]) != headerSize:
		return s.errorf(IndexFile, "record size %d and header size %d, want %d and %d",
			binary.LittleEndian.Uint32(b[12:]), binary.LittleEndian.Uint32(b[16:]), recordSize, headerSize)
	}
	docs := binary.LittleEndian.Uint64(b[24:])
	if want := uint64(headerSize) + docs*recordSize; docs > math.MaxInt32 || uint64(len(b)) != want {
		return s.errorf(IndexFile, "truncated or corrupt: the header says %d documents (%d bytes), the file has %d bytes", docs, want, len(b))
	}
	if err := s.checkFile(IndexFile, b); err != nil {
		return err
	}
	if int64(docs) != s.m.Counts.Documents {
		return s.errorf(IndexFile, "%d documents, the manifest says %d", docs, s.m.Counts.Documents)
	}
	s.recs = make([]record, docs)
	for i := range s.recs {
		s.recs[i] = getRecord(b[headerSize+recordSize*i:])
	}
	return nil
}

func (s *Store) openTokens() error {
	f, err := inputfile.Open(s.path(TokensFile))
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	size := st.Size()
	h := make([]byte, headerSize)
	if _, err := io.ReadFull(f, h); err != nil {
		return s.errorf(TokensFile, "truncated: %d bytes, shorter than the %d-byte header", size, headerSize)
	}
	switch {
	case string(h[:8]) != tokensMagic:
		return s.errorf(TokensFile, "not a memtrain token file (bad magic %q)", h[:8])
	case binary.LittleEndian.Uint32(h[8:]) != StoreVersion:
		return s.errorf(TokensFile, "version %d is not supported (want %d)", binary.LittleEndian.Uint32(h[8:]), StoreVersion)
	case binary.LittleEndian.Uint32(h[12:]) != dtypeUint32 || binary.LittleEndian.Uint32(h[20:]) != 4:
		return s.errorf(TokensFile, "dtype %d of %d bytes is not supported (want %d, uint32)",
			binary.LittleEndian.Uint32(h[12:]), binary.LittleEndian.Uint32(h[20:]), dtypeUint32)
	case binary.LittleEndian.Uint32(h[16:]) != headerSize:
		return s.errorf(TokensFile, "header size %d, want %d", binary.LittleEndian.Uint32(h[16:]), headerSize)
	}
	n := binary.LittleEndian.Uint64(h[24:])
	if want := uint64(headerSize) + 4*n; n > math.MaxInt64/8 || uint64(size) != want {
		return s.errorf(TokensFile, "truncated or corrupt: the header says %d tokens (%d bytes), the file has %d bytes", n, want, size)
	}
	if docs := binary.LittleEndian.Uint64(h[32:]); docs != uint64(len(s.recs)) {
		return s.errorf(TokensFile, "the header says %d documents, index.bin %d", docs, len(s.recs))
	}
	if int64(n) != s.m.Counts.Tokens {
		return s.errorf(TokensFile, "%d tokens, the manifest says %d", n, s.m.Counts.Tokens)
	}
	raw, unmap, err := mapFile(f, size)
	if err != nil {
		// No memory mapping here: read the file.
		raw, unmap = make([]byte, size), nil
		if _, err := f.ReadAt(raw, 0); err != nil {
			return fmt.Errorf("data: %w", err)
		}
	}
	s.raw, s.unmap = raw, unmap
	if err := s.checkFile(TokensFile, raw); err != nil {
		return err
	}
	payload := raw[headerSize:]
	if n == 0 {
		return nil
	}
	if littleEndian() {
		s.tokens = unsafe.Slice((*uint32)(unsafe.Pointer(&payload[0])), n)
	} else {
		s.tokens = make([]uint32, n)
		for i := range s.tokens {
			s.tokens[i] = binary.LittleEndian.Uint32(payload[4*i:])
		}
	}
	return nil
}

// maskHeader returns the header of mask.bin.
func maskHeader(tokens int64) []byte {
	h := make([]byte, headerSize)
	copy(h, maskMagic)
	binary.LittleEndian.PutUint32(h[8:], 1)
	binary.LittleEndian.PutUint32(h[16:], headerSize)
	binary.LittleEndian.PutUint64(h[24:], uint64(tokens))
	return h
}

// openMask maps mask.bin: a 64-byte header (magic "MTMASK\0\0", version
// 1 at 8, header size at 16, tokens at 24) and a byte per token, 0 or 1.
func (s *Store) openMask() error {
	f, err := inputfile.Open(s.path(MaskFile))
	if err != nil {
		return fmt.Errorf("data: %w (the manifest's version %d has a loss mask)", err, MaskedVersion)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	size := st.Size()
	raw, unmap, err := mapFile(f, size)
	if err != nil {
		raw, unmap = make([]byte, size), nil
		if _, err := f.ReadAt(raw, 0); err != nil {
			return fmt.Errorf("data: %w", err)
		}
	}
	s.munmap = unmap
	switch {
	case len(raw) < headerSize:
		return s.errorf(MaskFile, "truncated: %d bytes, shorter than the %d-byte header", len(raw), headerSize)
	case string(raw[:8]) != maskMagic:
		return s.errorf(MaskFile, "not a memtrain loss mask (bad magic %q)", raw[:8])
	case binary.LittleEndian.Uint32(raw[8:]) != 1 || binary.LittleEndian.Uint32(raw[16:]) != headerSize:
		return s.errorf(MaskFile, "version %d and header size %d, want 1 and %d", binary.LittleEndian.Uint32(raw[8:]), binary.LittleEndian.Uint32(raw[16:]), headerSize)
	}
	n := binary.LittleEndian.Uint64(raw[24:])
	if n != uint64(len(s.tokens)) || uint64(len(raw)) != uint64(headerSize)+n {
		return s.errorf(MaskFile, "truncated or corrupt: the header says %d tokens, the file has %d bytes, tokens.bin %d tokens", n, len(raw), len(s.tokens))
	}
	if err := s.checkFile(MaskFile, raw); err != nil {
		return err
	}
	s.mask = raw[headerSize:]
	for i, b := range s.mask {
		if b > 1 {
			return s.errorf(MaskFile, "value %d at token %d, want 0 or 1", b, i)
		}
	}
	return nil
}

// errClosed is returned by the methods of a closed Store.
var errClosed = errors.New("data: store closed")

func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// Close releases the store's memory mapping. The store must not be used
// after.
func (s *Store) Close() error {
	s.closed = true
	s.tokens, s.recs, s.mask = nil, nil, nil
	var err error
	if s.munmap != nil {
		err = s.munmap()
		s.munmap = nil
	}
	if s.unmap == nil {
		return err
	}
	if uerr := s.unmap(); err == nil {
		err = uerr
	}
	s.unmap, s.raw = nil, nil
	return err
}

// Dir returns the dataset's folder.
func (s *Store) Dir() string { return s.dir }

// Manifest returns the dataset's manifest. It must not be modified.
func (s *Store) Manifest() *Manifest { return &s.m }

// SeqLen returns the length T of the training sequences.
func (s *Store) SeqLen() int { return s.m.Settings.SeqLen }

// NumDocuments returns the number of documents, both splits.
func (s *Store) NumDocuments() int { return len(s.recs) }

// NumSequences returns the number of sequences of a split (0 for an unknown
// split).
func (s *Store) NumSequences(split Split) int {
	i, err := split.index()
	if err != nil {
		return 0
	}
	return int(s.views[i].counts.Sequences)
}

// DocInfo describes one document of a store.
type DocInfo struct {
	ID     int
	Source string // the input file
	Line   int64  // its line, or row for Parquet, in the input file
	Split  Split
	Offset int64 // its first token in tokens.bin, counted in tokens
	Tokens int   // BOS and EOS included
}

// Doc returns the description of document id.
func (s *Store) Doc(id int) (DocInfo, error) {
	if s.closed {
		return DocInfo{}, errClosed
	}
	if id < 0 || id >= len(s.recs) {
		return DocInfo{}, fmt.Errorf("data: document %d out of range [0, %d)", id, len(s.recs))
	}
	r := s.recs[id]
	split := Train
	if r.split == 1 {
		split = Holdout
	}
	return DocInfo{ID: id, Source: s.m.Sources[r.source].Path, Line: r.line, Split: split,
		Offset: r.offset, Tokens: int(r.length)}, nil
}

// DocTokens returns a copy of the tokens of document id.
func (s *Store) DocTokens(id int) ([]int32, error) {
	if s.closed {
		return nil, errClosed
	}
	if id < 0 || id >= len(s.recs) {
		return nil, fmt.Errorf("data: document %d out of range [0, %d)", id, len(s.recs))
	}
	r := s.recs[id]
	out := make([]int32, r.length)
	for i, t := range s.tokens[r.offset : r.offset+int64(r.length)] {
		out[i] = int32(t)
	}
	return out, nil
}

// HasMask says whether the dataset has a loss mask (a chat dataset,
// mask.bin).
func (s *Store) HasMask() bool { return s.mask != nil }

// DocMask returns a copy of the loss mask of document id, a 0 or 1 for each
// of its tokens as DocTokens returns them (1 for an assistant turn's
// tokens and the EOS the dataset appended, 0 for BOS and the prompt's), or
// nil for a dataset without a mask.
func (s *Store) DocMask(id int) ([]uint8, error) {
	if s.closed {
		return nil, errClosed
	}
	if id < 0 || id >= len(s.recs) {
		return nil, fmt.Errorf("data: document %d out of range [0, %d)", id, len(s.recs))
	}
	if s.mask == nil {
		return nil, nil
	}
	r := s.recs[id]
	return slices.Clone(s.mask[r.offset : r.offset+int64(r.length)]), nil
}

// Sequence writes sequence i of a split into ids, targets and weights, each
// at least SeqLen long: position t holds input ids[t], the target
// targets[t] that follows it, and weights[t], 1 for a real target and 0 for
// padding (whose ids and targets are Settings.PadID) and, in a chat
// dataset, for a target that the loss mask excludes (a prompt token). It
// returns the id of the sequence's document: for ModePack, the document of
// its first token.
func (s *Store) Sequence(split Split, i int, ids, targets []int32, weights []float32) (docID int, err error) {
	docID, _, err = s.sequence(split, i, ids, targets, weights)
	return docID, err
}

// sequence is Sequence, which also returns the number of positions that
// are not padding.
func (s *Store) sequence(split Split, i int, ids, targets []int32, weights []float32) (docID, real int, err error) {
	if s.closed {
		return 0, 0, errClosed
	}
	si, err := split.index()
	if err != nil {
		return 0, 0, err
	}
	v := &s.views[si]
	T := s.m.Settings.SeqLen
	if i < 0 || int64(i) >= v.counts.Sequences {
		return 0, 0, fmt.Errorf("data: %s sequence %d out of range [0, %d)", split, i, v.counts.Sequences)
	}
	if len(ids) < T || len(targets) < T || len(weights) < T {
		return 0, 0, fmt.Errorf("data: sequence buffers of %d, %d and %d, want at least %d", len(ids), len(targets), len(weights), T)
	}
	pad := s.m.Settings.PadID
	// The window w holds n <= T+1 tokens: ids = w[:T], targets = w[1:].
	var n int
	var get func(dst []int32, from int)
	var maskAt func(k int) uint8 // the mask of the window's token k
	if s.m.Settings.Mode == ModeDocument {
		docID = v.docs[i]
		r := s.recs[docID]
		toks := s.tokens[r.offset : r.offset+int64(r.length)]
		n = min(len(toks), T+1)
		get = func(dst []int32, from int) {
			for k, t := range toks[from : from+len(dst)] {
				dst[k] = int32(t)
			}
		}
		if s.mask != nil {
			mask := s.mask[r.offset : r.offset+int64(r.length)]
			maskAt = func(k int) uint8 { return mask[k] }
		}
	} else {
		start := int64(i) * int64(T)
		n = int(min(int64(T+1), v.counts.Tokens-start))
		docID = v.docs[v.docAt(start)]
		get = func(dst []int32, from int) { s.gather(v, start+int64(from), dst) }
		if s.mask != nil {
			window := make([]uint8, n)
			s.gatherMask(v, start, window)
			maskAt = func(k int) uint8 { return window[k] }
		}
	}
	m := min(n, T)
	get(ids[:m], 0)
	for t := m; t < T; t++ {
		ids[t] = pad
	}
	for t := range T {
		switch {
		case t+1 < m:
			targets[t], weights[t] = ids[t+1], 1
		case t+1 < n: // t+1 == T: the window's last token
			get(targets[t:t+1], T)
			weights[t] = 1
		default:
			targets[t], weights[t] = pad, 0
		}
		if maskAt != nil && t+1 < n && maskAt(t+1) == 0 {
			weights[t] = 0
		}
	}
	return docID, max(n-1, 0), nil
}

// docAt returns the index in v.docs of the document that holds position
// pos of the split's stream (ModePack).
func (v *splitView) docAt(pos int64) int {
	return sort.Search(len(v.docs), func(j int) bool { return v.start[j+1] > pos })
}

// gather copies the tokens of the split's stream from position pos into
// dst (ModePack).
func (s *Store) gather(v *splitView, pos int64, dst []int32) {
	for j, k := v.docAt(pos), 0; k < len(dst); j++ {
		r := s.recs[v.docs[j]]
		from := pos - v.start[j]
		take := min(int64(r.length)-from, int64(len(dst)-k))
		for x, t := range s.tokens[r.offset+from : r.offset+from+take] {
			dst[k+x] = int32(t)
		}
		k += int(take)
		pos += take
	}
}

// gatherMask copies the mask of the split's stream from position pos into
// dst (ModePack).
func (s *Store) gatherMask(v *splitView, pos int64, dst []uint8) {
	for j, k := v.docAt(pos), 0; k < len(dst); j++ {
		r := s.recs[v.docs[j]]
		from := pos - v.start[j]
		take := min(int64(r.length)-from, int64(len(dst)-k))
		copy(dst[k:], s.mask[r.offset+from:r.offset+from+take])
		k += int(take)
		pos += take
	}
}
