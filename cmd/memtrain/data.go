package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/inputfile"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
)

func newDataCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Prepare and inspect tokenized training datasets",
	}
	cmd.AddCommand(newDataPrepareCmd(), newDataInspectCmd())
	return cmd
}

type dataPrepareFlags struct {
	inputs       []string
	tokenizer    string
	out          string
	field        string
	format       string
	pretokenized bool
	paragraphs   bool
	seqLen       int
	mode         string
	holdout      float64
	seed         uint64
	bos, eos     bool
	splitSpecial bool
	strict       bool
	threads      int
	chat         bool
	chatTemplate string
	chatDate     string
}

func newDataPrepareCmd() *cobra.Command {
	var f dataPrepareFlags
	cmd := &cobra.Command{
		Use:   "prepare --input PATH... --tokenizer PATH --out DATASET",
		Short: "Tokenize a corpus into a dataset folder",
		Long: `prepare reads JSON Lines, Parquet or plain text files (or folders of them),
tokenizes the documents in parallel and writes a dataset folder: tokens.bin,
index.bin and manifest.json.

Each JSONL line or Parquet row is a document, its text in --field (default
"text"), or its token ids with --pretokenized (default field "input_ids"). A
text file is a document, or each of its blank-line separated paragraphs with
--paragraphs. Folders are walked in sorted order; by default only files with a
known extension (.jsonl .ndjson .parquet .pq .txt .md) are read, and every file
with --format. Bad records are skipped and counted, with examples naming file
and line (or row); --strict stops at the first.

--mode pack joins the documents and cuts windows of --seq-len+1 tokens, one
every --seq-len tokens; --mode document makes each document one sequence,
truncated or padded (padding has no loss). Each document starts with the
tokenizer's BOS (when it has one; --bos=false: none), as every command that
tokenizes text adds it; --eos ends it with EOS. --holdout sets aside that fraction of
the documents, chosen by a hash of their text and --seed.

--chat reads instruction and chat data from JSONL or Parquet: each record has
"messages", a list of {"role", "content"} (system, user, assistant), or the
alpaca "instruction", "input" (optional) and "output" (a user turn of the
instruction, a blank line and the input, and an assistant turn of the output).
Each conversation is rendered with the chat_template of the --tokenizer's
tokenizer_config.json (or --chat-template: builtin:llama2, builtin:llama3 or a
Jinja file; the built-in Llama 2 or Llama 3 format when the tokenizer has no
template), tokenized with its special tokens parsed (the template writes BOS,
so --bos is off), and the loss is on the assistant turns only: the dataset
records a loss mask per token. --chat-date fixes the date that templates print
(strftime_now). A record with an unknown role, a non-string content, no
assistant turn or no messages is skipped and counted, as other bad records are.`,
		Example: `  memtrain data prepare --input austen.jsonl --tokenizer builtin:llama3 --out austen-ds --eos
  memtrain data prepare --input shards/ --format parquet --tokenizer ./ckpt --out ds --mode document --seq-len 256 --holdout 0.1`,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.inputs = append(f.inputs, args...)
			return runDataPrepare(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.inputs, "input", nil, "input file or folder (repeatable; further paths may follow as arguments)")
	fl.StringVar(&f.tokenizer, "tokenizer", "", tokenizerFlagHelp)
	fl.StringVar(&f.out, "out", "", "dataset folder to create (must not exist, or be empty)")
	fl.StringVar(&f.field, "field", "", `JSONL field or Parquet column (default "text", or "input_ids" with --pretokenized)`)
	fl.StringVar(&f.format, "format", "auto", "input format: auto (by extension), jsonl, parquet or text")
	fl.BoolVar(&f.pretokenized, "pretokenized", false, "the field holds token ids, not text")
	fl.BoolVar(&f.paragraphs, "paragraphs", false, "text files: a document per blank-line separated paragraph")
	options.IntRange(fl, &f.seqLen, "seq-len", 0, 1, checkpoints.MaxPositions, "the default", "tokens per training sequence (default: the --tokenizer checkpoint's min(2048, max_position_embeddings), else 2048)")
	fl.StringVar(&f.mode, "mode", "pack", "pack (join documents, cut windows) or document (one sequence per document)")
	fl.Float64Var(&f.holdout, "holdout", 0, "fraction of documents held out, in [0, 1]")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the holdout choice")
	fl.BoolVar(&f.bos, "bos", true, "start each document with the BOS token (--bos=false: none; with --pretokenized the ids are taken as given unless --bos is set)")
	fl.BoolVar(&f.eos, "eos", false, "end each document with the EOS token")
	fl.BoolVar(&f.splitSpecial, "split-special", false, "treat special-token text in the input as plain text")
	fl.BoolVar(&f.strict, "strict", false, "fail on the first bad record instead of skipping it")
	threadsFlag(fl, &f.threads, "encoding threads (default all cores)")
	fl.BoolVar(&f.chat, "chat", false, "read chat records (messages, or alpaca instruction/input/output) and train on the assistant turns only")
	fl.StringVar(&f.chatTemplate, "chat-template", "", "with --chat: builtin:llama2, builtin:llama3 or a Jinja file (default: the tokenizer's chat_template, else its family's built-in format)")
	fl.StringVar(&f.chatDate, "chat-date", "", "with --chat: the date strftime_now gives the template, YYYY-MM-DD (default today)")
	cmd.MarkFlagRequired("tokenizer")
	cmd.MarkFlagRequired("out")
	return cmd
}

func runDataPrepare(cmd *cobra.Command, f dataPrepareFlags) error {
	if len(f.inputs) == 0 {
		return errors.New("data prepare: no input (use --input)")
	}
	format, err := data.ParseFormat(f.format)
	if err != nil {
		return err
	}
	mode, err := data.ParseMode(f.mode)
	if err != nil {
		return err
	}
	tok, files, err := openTokenizer(f.tokenizer)
	if err != nil {
		return err
	}
	chat, err := prepareChatTemplate(cmd, &f, tok, files)
	if err != nil {
		return err
	}
	// A length the model cannot take is refused here, not when the
	// fine-tune that reads the dataset starts.
	var long *checkpoints.SeqLenError
	if f.seqLen, err = checkpoints.ModelSeqLen(f.tokenizer, f.seqLen); errors.As(err, &long) {
		return fmt.Errorf("data prepare: --seq-len %v; give --seq-len %d or less", err, long.Max)
	} else if err != nil {
		return fmt.Errorf("data prepare: %w", err)
	}
	// BOS starts every document, as every command that tokenizes text adds
	// it, when the tokenizer has one (asked for with --bos, it must).
	// Pretokenized ids are taken as given (HF tokenizers already wrote
	// their BOS) unless --bos asks for one.
	if _, ok := tok.BOS(); (!ok || chat != nil || f.pretokenized) && !cmd.Flags().Changed("bos") {
		f.bos = false
	}
	cfg := data.PrepareConfig{
		Read: data.ReadOptions{
			Format: format, Field: f.field, Pretokenized: f.pretokenized,
			Paragraphs: f.paragraphs, Strict: f.strict,
		},
		Mode: mode, SeqLen: f.seqLen, BOS: f.bos, EOS: f.eos,
		Holdout: f.holdout, Seed: f.seed, SplitSpecial: f.splitSpecial, Threads: f.threads,
		Chat: chat, TokenizerFiles: files,
		Warn: func(msg string) { fmt.Fprintf(cmd.ErrOrStderr(), "warning: data prepare: %s (--bos=false)\n", msg) },
	}
	var bar *progressbar.ProgressBar
	if isTerminal(cmd.ErrOrStderr()) {
		var total int64 // the inputs' bytes; unknown (0) if they do not open
		if r, err := data.NewReader(f.inputs, cfg.Read); err == nil {
			total = r.Size()
			r.Close()
		}
		bar = progressbar.DefaultBytes(total, "prepare")
		cfg.Read.Progress = func(n int64) { bar.Add64(n) }
	}
	start := time.Now()
	m, err := data.Prepare(f.out, f.inputs, tok, cfg)
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	threads := f.threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	printPrepareSummary(cmd.OutOrStdout(), f.out, m, elapsed, threads)
	return nil
}

// prepareChatTemplate returns the chat template of --chat, or nil without
// it, and refuses the flags that a chat dataset cannot take.
func prepareChatTemplate(cmd *cobra.Command, f *dataPrepareFlags, tok *tokenizer.Tokenizer, files map[string][]byte) (*data.ChatTemplate, error) {
	changed := cmd.Flags().Changed
	if !f.chat {
		for _, name := range []string{"chat-template", "chat-date"} {
			if changed(name) {
				return nil, fmt.Errorf("data prepare: --%s needs --chat", name)
			}
		}
		return nil, nil
	}
	for _, name := range []string{"field", "pretokenized", "paragraphs", "split-special"} {
		if changed(name) {
			return nil, fmt.Errorf("data prepare: --chat takes no --%s (chat records have fixed fields and are rendered with special tokens)", name)
		}
	}
	if changed("bos") && f.bos {
		return nil, errors.New("data prepare: --chat takes no --bos: the chat template writes its own BOS")
	}
	var opt data.ChatOptions
	if f.chatDate != "" {
		at, err := time.Parse("2006-01-02", f.chatDate)
		if err != nil {
			return nil, fmt.Errorf("data prepare: --chat-date %q: want a date YYYY-MM-DD", f.chatDate)
		}
		opt.Now = at
	}
	switch t := f.chatTemplate; {
	case t == "" || strings.HasPrefix(t, "builtin:"):
		opt.Template = t
	default:
		b, err := inputfile.ReadFile(t)
		if err != nil {
			return nil, fmt.Errorf("data prepare: --chat-template: %w", err)
		}
		opt.Template = string(b)
	}
	ct, err := data.NewChatTemplate(tok, files[tokenizer.ConfigFileName], opt)
	if err != nil {
		return nil, fmt.Errorf("data prepare: %w", err)
	}
	return ct, nil
}

func printPrepareSummary(w io.Writer, out string, m *data.Manifest, elapsed time.Duration, threads int) {
	var bytes int64
	for _, s := range m.Sources {
		bytes += s.Bytes
	}
	secs := elapsed.Seconds()
	files := "files"
	if len(m.Sources) == 1 {
		files = "file"
	}
	plural := "s"
	if threads == 1 {
		plural = ""
	}
	fmt.Fprintf(w, "read %d %s, %.1f MB, in %.2f s: %.2f MB/s with %d thread%s\n",
		len(m.Sources), files, float64(bytes)/1e6, secs, float64(bytes)/1e6/max(secs, 1e-9), threads, plural)
	m.WriteSummary(w)
	fmt.Fprintf(w, "wrote %s\n", out)
}

type dataInspectFlags struct {
	samples   int
	json      bool
	tokenizer string
}

func newDataInspectCmd() *cobra.Command {
	var f dataInspectFlags
	cmd := &cobra.Command{
		Use:   "inspect DATASET",
		Short: "Show a dataset's counts, length histograms and samples",
		Long: `inspect opens a dataset folder (verifying its checksums) and prints its
tokenizer, settings, sources, counts per split, bad records, histograms of the
document lengths and of the targets per sequence, and the first --samples
training sequences, decoded with the tokenizer the dataset carries (data
prepare stores it in the folder) or --tokenizer (which must be the
dataset's), else as token ids.`,
		Example: `  memtrain data inspect austen-ds --tokenizer builtin:llama3 --samples 2`,
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return runDataInspect(cmd, args[0], f) },
	}
	fl := cmd.Flags()
	options.IntRange(fl, &f.samples, "samples", 3, 0, units.MaxCount, "", "sequences to show")
	fl.BoolVar(&f.json, "json", false, "print a JSON report")
	fl.StringVar(&f.tokenizer, "tokenizer", "", tokenizerFlagHelp+"; decodes the samples of a dataset that carries no tokenizer")
	return cmd
}

func runDataInspect(cmd *cobra.Command, dir string, f dataInspectFlags) error {
	var tok *tokenizer.Tokenizer
	if f.tokenizer != "" {
		var err error
		if tok, _, err = openTokenizer(f.tokenizer); err != nil {
			return err
		}
	}
	s, err := data.OpenStore(dir)
	if err != nil {
		return err
	}
	defer s.Close()
	m := s.Manifest()
	if tok != nil && tok.Hash() != m.Tokenizer.SHA256 {
		return fmt.Errorf("data inspect: tokenizer %s (sha256 %s) is not the dataset's (sha256 %s)", f.tokenizer, tok.Hash(), m.Tokenizer.SHA256)
	}
	if tok == nil {
		// The dataset's own tokenizer, when it carries one (data
		// prepare stores it); else the samples are shown as ids.
		if tok, err = s.Tokenizer(); err != nil {
			return fmt.Errorf("data inspect: %w", err)
		}
	}
	rep, err := data.Inspect(s, data.InspectOptions{Samples: f.samples, Tokenizer: tok})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(rep)
	}
	return rep.WriteText(out)
}
