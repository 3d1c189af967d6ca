package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/inputfile"
)

type tokenizeFlags struct {
	tokenizer    string
	input        string
	field        string
	special      bool
	splitSpecial bool
	decode       bool
	skipSpecial  bool
	threads      int
}

// tokenizeBatch is how many lines are encoded together across the threads.
const tokenizeBatch = 512

func newTokenizeCmd() *cobra.Command {
	var f tokenizeFlags
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer PATH [--input FILE] [--special] [--decode]",
		Short: "Encode JSONL text to token ids, or decode ids to text",
		Long: `tokenize reads JSON Lines and writes JSON Lines in the same order.

Encoding reads {"text": "..."} (another field with --field) and writes
{"ids": [...]}. Special-token text in the input (e.g. "<|eot_id|>") is matched
as HuggingFace does unless --split-special; --special adds the tokenizer's
special tokens (BOS). Decoding (--decode) reads {"ids": [...]} (or
"input_ids") and writes {"text": "..."}. Blank lines are skipped.`,
		Example: `  echo '{"text":"Hello world"}' | memtrain tokenize --tokenizer builtin:llama3 --special
  memtrain tokenize --tokenizer ./ckpt --input ids.jsonl --decode`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runTokenize(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tokenizer, "tokenizer", "", tokenizerFlagHelp)
	fl.StringVar(&f.input, "input", "", "input JSONL file (default standard input)")
	fl.StringVar(&f.field, "field", "text", "JSON field holding the text to encode")
	fl.BoolVar(&f.special, "special", false, "add the tokenizer's special tokens (BOS) when encoding")
	fl.BoolVar(&f.splitSpecial, "split-special", false, "treat special-token text in the input as plain text")
	fl.BoolVar(&f.decode, "decode", false, "decode {\"ids\": [...]} lines to {\"text\": ...}")
	fl.BoolVar(&f.skipSpecial, "skip-special", false, "when decoding, leave special tokens out of the text")
	fl.IntVar(&f.threads, "threads", 0, "encoding threads (default all cores)")
	cmd.MarkFlagRequired("tokenizer")
	return cmd
}

func runTokenize(cmd *cobra.Command, f tokenizeFlags) error {
	if err := checkThreads(f.threads); err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	tok, _, err := openTokenizer(f.tokenizer)
	if err != nil {
		return err
	}
	in, name := cmd.InOrStdin(), "stdin"
	var bar *progressbar.ProgressBar
	if f.input != "" {
		file, err := inputfile.Open(f.input)
		if err != nil {
			return fmt.Errorf("tokenize: %w", err)
		}
		defer file.Close()
		in, name = file, f.input
		if st, err := file.Stat(); err == nil && isTerminal(cmd.ErrOrStderr()) {
			bar = progressbar.DefaultBytes(st.Size(), "tokenize")
			in = io.TeeReader(file, bar)
		}
	}
	w := bufio.NewWriterSize(cmd.OutOrStdout(), 1<<20)
	if f.decode {
		err = decodeLines(tok, in, name, w, f.skipSpecial)
	} else {
		err = encodeLines(tok, in, name, w, f)
	}
	if err != nil {
		return err
	}
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	return w.Flush()
}

func encodeLines(tok *tokenizer.Tokenizer, in io.Reader, name string, w *bufio.Writer, f tokenizeFlags) error {
	opt := tokenizer.EncodeOptions{AddSpecial: f.special, SplitSpecial: f.splitSpecial}
	texts := make([]string, 0, tokenizeBatch)
	lines := make([]int64, 0, tokenizeBatch)
	flush := func() error {
		enc, errs := tok.EncodeBatchEach(texts, opt, f.threads)
		for i, ids := range enc {
			if errs != nil && errs[i] != nil {
				return lineErrorf("tokenize: %s:%d: %w", name, lines[i], errs[i])
			}
			if err := writeIDs(w, ids); err != nil {
				return err
			}
		}
		texts, lines = texts[:0], lines[:0]
		return nil
	}
	err := data.ReadLines(in, 0, func(line []byte, n int64) error {
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(line, &rec); err != nil {
			return lineErrorf("tokenize: %s:%d: invalid JSON: %v", name, n, err)
		}
		raw, ok := rec[f.field]
		if !ok {
			return lineErrorf("tokenize: %s:%d: missing field %q", name, n, f.field)
		}
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return lineErrorf("tokenize: %s:%d: field %q: want a string", name, n, f.field)
		}
		texts, lines = append(texts, text), append(lines, n)
		if len(texts) == tokenizeBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return wrapLineErr("tokenize", err, name)
	}
	return flush()
}

func writeIDs(w *bufio.Writer, ids []int32) error {
	buf := make([]byte, 0, 8+7*len(ids))
	buf = append(buf, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(id), 10)
	}
	buf = append(buf, "]}\n"...)
	_, err := w.Write(buf)
	return err
}

func decodeLines(tok *tokenizer.Tokenizer, in io.Reader, name string, w *bufio.Writer, skipSpecial bool) error {
	vocab := tok.VocabSize()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	err := data.ReadLines(in, 0, func(line []byte, n int64) error {
		var rec struct {
			IDs      *[]int64 `json:"ids"`
			InputIDs *[]int64 `json:"input_ids"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return lineErrorf("tokenize: %s:%d: invalid JSON or ids that are not integers: %v", name, n, err)
		}
		src := rec.IDs
		if src == nil {
			src = rec.InputIDs
		}
		if src == nil {
			return lineErrorf("tokenize: %s:%d: missing field \"ids\" (or \"input_ids\")", name, n)
		}
		ids := make([]int32, len(*src))
		for i, id := range *src {
			if id < 0 || id >= int64(vocab) {
				return lineErrorf("tokenize: %s:%d: token id %d outside the vocabulary [0, %d)", name, n, id, vocab)
			}
			ids[i] = int32(id)
		}
		text, err := tok.DecodeChecked(ids, skipSpecial)
		if err != nil {
			return lineErrorf("tokenize: %s:%d: %w", name, n, err)
		}
		return enc.Encode(struct {
			Text string `json:"text"`
		}{text})
	})
	return wrapLineErr("tokenize", err, name)
}

// lineError is an error about one line of an input that names the
// command, the input and the line already (lineErrorf makes one).
type lineError struct{ error }

func (e lineError) Unwrap() error { return e.error }

func lineErrorf(format string, args ...any) error { return lineError{fmt.Errorf(format, args...)} }

// wrapLineErr names the command and the input for errors that the line
// reader itself produced (I/O errors, over-long lines); a line's own
// errors say so already.
func wrapLineErr(command string, err error, name string) error {
	var le lineError
	if err == nil || errors.As(err, &le) {
		return err
	}
	return fmt.Errorf("%s: %s: %w", command, name, err)
}
