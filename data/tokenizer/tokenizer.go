// Package tokenizer implements HuggingFace tokenizer.json tokenizers of the
// BPE kind, and agrees with HF tokenizers (the Rust library) token for token
// on the Llama families:
//
//   - Llama 3 (and other tiktoken-style models): byte-level BPE behind the
//     Llama 3 pre-tokenizer pattern, which a hand-written splitter matches
//     rather than a regular-expression engine (the pattern needs look-ahead,
//     which Go's regexp lacks);
//   - Llama 2 (and other SentencePiece-style models): BPE over the whole
//     normalized text, with byte fallback.
//
// Other tokenizer.json files load if they use only the supported parts: the
// BPE model; the normalizers Sequence, Prepend, Replace and Strip; the
// pre-tokenizers Sequence, Split, ByteLevel and Metaspace; the decoders
// Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip and Metaspace; and
// the post-processors TemplateProcessing, BertProcessing, RobertaProcessing,
// ByteLevel and Sequence. Anything else is an error that names the file and
// the field. Regular expressions other than the Llama 3 pattern are read by
// regexp2, whose syntax and semantics are close to, but not exactly, those
// of Oniguruma, HF's engine; those that need no backtracking run on Go's
// regexp, in linear time, and the others (look-around, back-references,
// atomic groups) on regexp2, each search within a time budget. The
// truncation and padding settings are ignored: Encode returns all the
// tokens of the text.
//
// A hostile tokenizer.json cannot make encoding or decoding hang or exhaust
// memory: a search past its budget, or normalizers or decoders that would
// write more than a bounded multiple of their input (see growth), fail with
// an error that names the file and the component, which EncodeChecked and
// DecodeChecked return. The memory of BPE is linear in the longest word,
// about 20 bytes a character.
//
// # Added tokens
//
// As in HF, the added tokens are found in the input text before normalization
// (leftmost first, then longest), and the text between them is normalized and
// encoded piece by piece. EncodeOptions.SplitSpecial turns this off for the
// special ones, whose text is then encoded as ordinary text. Also as in HF,
// an added token keeps the id it has in the model's vocabulary, and the
// others are numbered from the end of the vocabulary in the order of the
// file, which gives the file's own ids in every file that HF wrote.
//
// # Unicode
//
// The Llama 3 pattern classes characters as letters, numbers and white space
// by Go's Unicode tables (Unicode 15.0 in Go 1.26). Oniguruma, in HF, knows
// later versions, so text with characters assigned since (such as CJK
// Extension I or Egyptian Hieroglyphs Extended-A) may split differently.
//
// Encode takes any string. Invalid UTF-8 bytes are classed as U+FFFD by the
// pre-tokenizer but keep their own bytes, so byte-level BPE (Llama 3) encodes
// them losslessly: the tokens' bytes are the input's bytes. BPE with byte
// fallback (Llama 2) encodes each invalid byte as its <0xXX> token. Decode
// follows HF and returns valid UTF-8: the byte-level decoder replaces each
// ill-formed sequence with one U+FFFD (as Rust's from_utf8_lossy does), and
// the byte-fallback decoder each byte of an ill-formed run of byte tokens.
//
// # Performance
//
// A Tokenizer caches the tokens of the words it has encoded, per goroutine
// and within a bounded size, and EncodeBatch spreads a batch over goroutines.
package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/memtrain/memtrain/internal/inputfile"
)

// ID is a token id. Token ids are int32 throughout memtrain, and the methods
// of Tokenizer take and return plain int32 values.
type ID = int32

// A Tokenizer encodes text to token ids and decodes them back. It is safe
// for concurrent use.
type Tokenizer struct {
	hash   string
	family string

	added      *matcher // added tokens matched in the raw text
	normAdded  *matcher // added tokens matched in normalized text
	normalizer normalizer
	pre        preTokenizer // nil: each piece is one word
	byteLevel  bool         // map each word to byte-level characters
	model      *bpe

	decoder        decoder // nil: tokens are joined with spaces
	byteLevelOnly  bool    // decoder is exactly ByteLevel
	prefix, suffix []int32 // added by the post-processor

	vocab   map[string]int32 // token → id, the model's and the added tokens
	tokens  []string         // id → token
	known   []bool           // id has a token
	special []bool           // id is a special added token

	bos, eos       int32
	hasBOS, hasEOS bool

	states sync.Pool // of *encState
}

// EncodeOptions control Encode.
type EncodeOptions struct {
	// AddSpecial adds the post-processor's special tokens, such as the BOS
	// token of the Llama families (HF add_special_tokens=True).
	AddSpecial bool

	// SplitSpecial treats special-token text in the input as ordinary text
	// (HF split_special_tokens, or encode_special_tokens in tokenizers).
	SplitSpecial bool
}

// encState is the scratch space and word cache of one encoding goroutine.
type encState struct {
	segments []segment
	pieces   []piece
	matches  []match
	ranges   []flagged
	buf      []byte
	ids      []int32
	pairs    []merge
	next     []int32
	heap     mergeHeap
	cache    map[string]span
	arena    []int32
}

// span locates a cached word's tokens in encState.arena.
type span struct{ off, n int32 }

// Load reads a tokenizer from a tokenizer.json file, or from a directory that
// holds one. A tokenizer_config.json beside it, if there is one, names the
// BOS and EOS tokens.
func Load(path string) (*Tokenizer, error) {
	file := path
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		file = filepath.Join(path, FileName)
	}
	data, err := inputfile.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfgFile := filepath.Join(filepath.Dir(file), ConfigFileName)
	cfg, err := inputfile.ReadFile(cfgFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		cfg, cfgFile = nil, ""
	}
	return parse(file, data, cfgFile, cfg)
}

// Parse builds a tokenizer from the bytes of a tokenizer.json file and,
// optionally, of its tokenizer_config.json (config may be nil). The name,
// such as the file's path, is used in error messages.
func Parse(name string, tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	return parse(name, tokenizerJSON, ConfigFileName, configJSON)
}

func (t *Tokenizer) getState() *encState {
	if st, ok := t.states.Get().(*encState); ok {
		return st
	}
	return &encState{cache: make(map[string]span)}
}

// Encode returns the token ids of text. It takes any string, valid UTF-8 or
// not (see the package documentation). On a text that the tokenizer fails
// to encode, which only a hostile tokenizer.json can make happen (a regular
// expression that backtracks without end, normalizers that blow the text
// up), it returns nil; EncodeChecked says why.
func (t *Tokenizer) Encode(text string, opt EncodeOptions) []int32 {
	ids, _ := t.EncodeChecked(text, opt)
	return ids
}

// EncodeChecked is Encode with its error: one that names the tokenizer file
// and the component (such as normalizer.normalizers[2]) that failed.
func (t *Tokenizer) EncodeChecked(text string, opt EncodeOptions) ([]int32, error) {
	st := t.getState()
	defer t.putState(st)
	return t.encode(st, text, opt)
}

// putState returns st to the pool without the scratch space that a long
// text made it grow, which the pool would otherwise hold.
func (t *Tokenizer) putState(st *encState) {
	const most = maxKeptSymbols
	if cap(st.segments) > most {
		st.segments = nil
	}
	if cap(st.pieces) > most {
		st.pieces = nil
	}
	if cap(st.matches) > most {
		st.matches = nil
	}
	if cap(st.ranges) > most {
		st.ranges = nil
	}
	if cap(st.buf) > 4*most {
		st.buf = nil
	}
	t.states.Put(st)
}

// maxText bounds the bytes of a text to encode, so that positions within
// it fit the int32 of the BPE merge.
const maxText = math.MaxInt32

func (t *Tokenizer) encode(st *encState, text string, opt EncodeOptions) ([]int32, error) {
	if len(text) > maxText {
		return nil, fmt.Errorf("tokenizer: a text of %d bytes is longer than the %d that can be encoded at once", len(text), maxText)
	}
	ids := make([]int32, 0, len(text)/4+len(t.prefix)+len(t.suffix)+1)
	if opt.AddSpecial {
		ids = append(ids, t.prefix...)
	}
	st.segments = t.added.split(st.segments[:0], text, opt.SplitSpecial, true)
	for i := range st.segments {
		seg := st.segments[i]
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		s, err := t.normalize(seg.text)
		if err != nil {
			return nil, err
		}
		if len(s) > maxText {
			return nil, fmt.Errorf("tokenizer: a text normalized to %d bytes is longer than the %d that can be encoded at once", len(s), maxText)
		}
		if t.normAdded.empty() {
			if ids, err = t.encodePiece(st, ids, piece{s, seg.start}); err != nil {
				return nil, err
			}
			continue
		}
		// Added tokens that match normalized text. The segments are
		// collected separately, as st.segments is being iterated.
		for _, sub := range t.normAdded.split(nil, s, opt.SplitSpecial, seg.start) {
			if sub.id >= 0 {
				ids = append(ids, sub.id)
			} else if ids, err = t.encodePiece(st, ids, piece{sub.text, sub.start}); err != nil {
				return nil, err
			}
		}
	}
	if opt.AddSpecial {
		ids = append(ids, t.suffix...)
	}
	return ids, nil
}

// MaxWordBytes bounds one pre-tokenized word, the unit BPE merges: its
// merge holds about 22 bytes a byte of the word (TestBPELongWordMemory),
// so a word of this size takes some 370 MB; a longer one (a text with no
// break the pre-tokenizer splits at, tens of megabytes of it) is refused
// rather than tokenized differently from Hugging Face's tokenizers, which
// have no bound.
const MaxWordBytes = 16 << 20

func wordTooLong(n int) error {
	return fmt.Errorf("tokenizer: a word of %d bytes (no break the pre-tokenizer splits at) is longer than the %d one can be", n, MaxWordBytes)
}

// normalize applies the normalizer to s, within the bound of chainGrowth.
func (t *Tokenizer) normalize(s string) (string, error) {
	if t.normalizer == nil {
		return s, nil
	}
	return t.normalizer.normalize(s, bound(len(s), chainGrowth))
}

// encodePiece pre-tokenizes normalized text and appends the tokens of its words.
func (t *Tokenizer) encodePiece(st *encState, ids []int32, p piece) ([]int32, error) {
	if p.s == "" {
		return ids, nil
	}
	if t.pre == nil {
		if len(p.s) > MaxWordBytes {
			return nil, wordTooLong(len(p.s))
		}
		return t.encodeWord(st, ids, p.s), nil
	}
	var err error
	if st.pieces, err = t.pre.split(st.pieces[:0], p, st); err != nil {
		return nil, err
	}
	for _, w := range st.pieces {
		if len(w.s) > MaxWordBytes {
			return nil, wordTooLong(len(w.s))
		}
		ids = t.encodeWord(st, ids, w.s)
	}
	return ids, nil
}

func (t *Tokenizer) encodeWord(st *encState, ids []int32, w string) []int32 {
	if t.byteLevel {
		st.buf = appendByteLevel(st.buf[:0], w)
	} else {
		st.buf = append(st.buf[:0], w...)
	}
	return t.model.encodeWord(st, ids, st.buf)
}

// EncodeBatch encodes texts on threads goroutines (0 means GOMAXPROCS) and
// returns their token ids in the order of texts. The result does not depend
// on threads. A text that fails to encode (see Encode) has nil ids;
// EncodeBatchChecked says why.
func (t *Tokenizer) EncodeBatch(texts []string, opt EncodeOptions, threads int) [][]int32 {
	out, _ := t.encodeBatch(texts, opt, threads)
	return out
}

// EncodeBatchEach is EncodeBatch with each text's error: errs is nil when
// every text encoded, else errs[i] is text i's (nil ids), so that a caller
// can report the texts that failed and keep the others.
func (t *Tokenizer) EncodeBatchEach(texts []string, opt EncodeOptions, threads int) (ids [][]int32, errs []error) {
	return t.encodeBatch(texts, opt, threads)
}

// EncodeBatchChecked is EncodeBatch with the error of the first text (in the
// order of texts) that failed to encode, with its index.
func (t *Tokenizer) EncodeBatchChecked(texts []string, opt EncodeOptions, threads int) ([][]int32, error) {
	out, errs := t.encodeBatch(texts, opt, threads)
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("text %d of %d: %w", i, len(texts), err)
		}
	}
	return out, nil
}

// encodeBatch encodes texts, with each one's error, or nil errs if none.
func (t *Tokenizer) encodeBatch(texts []string, opt EncodeOptions, threads int) (out [][]int32, errs []error) {
	out = make([][]int32, len(texts))
	var mu sync.Mutex
	fail := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if errs == nil {
			errs = make([]error, len(texts))
		}
		errs[i] = err
	}
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	threads = min(threads, len(texts))
	if threads <= 1 {
		st := t.getState()
		for i, s := range texts {
			var err error
			if out[i], err = t.encode(st, s, opt); err != nil {
				fail(i, err)
			}
		}
		t.putState(st)
		return out, errs
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			st := t.getState()
			defer t.putState(st)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(texts) {
					return
				}
				var err error
				if out[i], err = t.encode(st, texts[i], opt); err != nil {
					fail(i, err)
				}
			}
		})
	}
	wg.Wait()
	return out, errs
}

// Decode returns the text of ids, special tokens included, as HF's
// decode(ids, skip_special_tokens=False). Ids that name no token are skipped,
// as in HF. If the decoder fails, which only a hostile tokenizer.json can
// make happen (see Encode), it returns ""; DecodeChecked says why.
func (t *Tokenizer) Decode(ids []int32) string {
	s, _ := t.DecodeChecked(ids, false)
	return s
}

// DecodeSkipSpecial is Decode without the special tokens, as HF's
// decode(ids, skip_special_tokens=True).
func (t *Tokenizer) DecodeSkipSpecial(ids []int32) string {
	s, _ := t.DecodeChecked(ids, true)
	return s
}

// DecodeChecked is Decode, or DecodeSkipSpecial if skipSpecial, with its
// error: one that names the tokenizer file and the decoder that failed.
func (t *Tokenizer) DecodeChecked(ids []int32, skipSpecial bool) (string, error) {
	if t.byteLevelOnly {
		var b []byte
		for _, id := range ids {
			if t.has(id) && !(skipSpecial && t.special[id]) {
				b = appendByteLevelDecoded(b, t.tokens[id])
			}
		}
		return lossyString(b), nil
	}
	tokens := make([]string, 0, len(ids))
	n := 0
	for _, id := range ids {
		if t.has(id) && !(skipSpecial && t.special[id]) {
			tokens = append(tokens, t.tokens[id])
			n += len(t.tokens[id])
		}
	}
	if t.decoder == nil {
		return strings.Join(tokens, " "), nil
	}
	tokens, err := t.decoder.decodeChain(tokens, bound(n, chainGrowth))
	if err != nil {
		return "", err
	}
	return strings.Join(tokens, ""), nil
}

func (t *Tokenizer) has(id int32) bool { return id >= 0 && int(id) < len(t.known) && t.known[id] }

// VocabSize returns one more than the largest token id, over the model's
// vocabulary and the added tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence token: the bos_token of
// tokenizer_config.json if it names a known token, else the first special
// token that the post-processor puts before the text.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.hasBOS }

// EOS returns the end-of-sequence token: the eos_token of
// tokenizer_config.json if it names a known token, else the first special
// token that the post-processor puts after the text, else the first special
// added token among "</s>", "<|end_of_text|>", "<|endoftext|>" and "<eos>".
func (t *Tokenizer) EOS() (int32, bool) { return t.eos, t.hasEOS }

// TokenID returns the id of a token, an added token or one of the model's
// vocabulary (in its own alphabet: "Ġthe" for Llama 3's " the").
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

// Token returns the token of an id, as TokenID spells it.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if !t.has(id) {
		return "", false
	}
	return t.tokens[id], true
}

// Hash returns the SHA-256 of the tokenizer.json bytes, in hexadecimal.
func (t *Tokenizer) Hash() string { return t.hash }

// Family describes the kind of tokenizer: "bpe/byte-level" (Llama 3, GPT-2),
// "bpe/sentencepiece" (Llama 2: byte fallback or the "▁" space marker) or
// "bpe".
func (t *Tokenizer) Family() string { return t.family }

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
