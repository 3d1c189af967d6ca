package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"

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
	threadsFlag(fl, &f.threads, "encoding threads (default all cores)")
	cmd.MarkFlagRequired("tokenizer")
	return cmd
}

func runTokenize(cmd *cobra.Command, f tokenizeFlags) error {
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
		err = data.DecodeLines(tok, in, w, f.skipSpecial)
	} else {
		err = data.EncodeLines(tok, in, w, f.field, tokenizer.EncodeOptions{AddSpecial: f.special, SplitSpecial: f.splitSpecial}, f.threads)
	}
	if err := inputErr("tokenize", name, err); err != nil {
		return err
	}
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	return w.Flush()
}

// inputErr names the command and the input of an error reading it, and
// the line when the error is one line's (data.LineError): "tokenize:
// FILE:12: invalid JSON: …".
func inputErr(command, name string, err error) error {
	var le *data.LineError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &le):
		return fmt.Errorf("%s: %s:%d: %w", command, name, le.Line, le.Err)
	}
	return fmt.Errorf("%s: %s: %w", command, name, err)
}
