package main

import (
	"bufio"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/goldfish"
	"github.com/memtrain/memtrain/internal/inputfile"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
)

type goldfishFlags struct {
	strategy  string
	k, h      int
	start     int
	tokenizer string
	input     string
	field     string
	bos       bool
	asTargets bool
	show      bool
}

func newGoldfishCmd() *cobra.Command {
	var f goldfishFlags
	cmd := &cobra.Command{
		Use:   "goldfish [--strategy S] [--k K] [--h H] [--start N] [--tokenizer PATH] [--input FILE] [--show]",
		Short: "Show which tokens the goldfish loss drops from training",
		Long: `goldfish reads JSON Lines of token ids, {"ids": [...]} or {"input_ids": [...]},
or of text, {"text": "..."} (another field with --field; needs --tokenizer; BOS
added unless --bos=false), and writes for each line which tokens the goldfish
loss drops:

  {"ids":[...],"drop":[0,1,...],"dropped":n,"fraction":f}

A causal LM is trained on the targets ids[1:], token i predicted from the ones
before it, and the mask applies to them: drop[i] is 1 when the loss at token
ids[i] is dropped, drop[0] is always 0, and fraction is dropped over the
len(ids)-1 targets. With --as-targets the ids are the targets themselves
(labels) and every position may be dropped.

Strategies (Hans et al. 2024, the reference's names): static drops the
targets at positions start, start+k, start+2k, … (position 0 is the first
target, ids[1]); hash-table (the published runs: --k 4 --h 13) and
hash-avalanche drop a target according to the h targets ending at it, so a
repeated passage drops the same tokens every time.

--show prints the decoded text instead, with the dropped tokens in reverse
video on a terminal and [[in brackets]] otherwise, and the overall fraction on
standard error. Blank lines are skipped.`,
		Example: `  echo '{"text":"It is a truth universally acknowledged"}' | memtrain goldfish --tokenizer builtin:llama3 --show
  memtrain goldfish --strategy static --k 4 --start 0 --input ids.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runGoldfish(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.strategy, "strategy", "hash-table", "static, hash-table or hash-avalanche")
	options.IntRange(fl, &f.k, "k", 4, 2, units.MaxCount, "", "drop 1 target in k")
	options.IntRange(fl, &f.h, "h", 13, 1, units.MaxCount, "", "context width of the hash strategies: the targets hashed, ending at the one decided")
	options.IntRange(fl, &f.start, "start", 0, 0, units.MaxCount, "", "first target position dropped by the static strategy (0: the first target)")
	fl.StringVar(&f.tokenizer, "tokenizer", "", tokenizerFlagHelp+" (needed for text lines and to decode ids with --show)")
	fl.StringVar(&f.input, "input", "", "input JSONL file (default standard input)")
	fl.StringVar(&f.field, "field", "text", "JSON field holding the text of lines without ids")
	fl.BoolVar(&f.bos, "bos", true, "add BOS when tokenizing text")
	fl.BoolVar(&f.asTargets, "as-targets", false, "the ids are the targets themselves (labels): mask all of them, not ids[1:]")
	fl.BoolVar(&f.show, "show", false, "print the decoded text with the dropped tokens highlighted")
	return cmd
}

func runGoldfish(cmd *cobra.Command, f goldfishFlags) error {
	strategy, err := goldfish.ParseStrategy(f.strategy)
	if err != nil {
		return err
	}
	if strategy == goldfish.Static && cmd.Flags().Changed("h") {
		return fmt.Errorf("goldfish: --h applies to the hash strategies, not to static")
	}
	if strategy != goldfish.Static && cmd.Flags().Changed("start") {
		return fmt.Errorf("goldfish: --start applies to the static strategy, not to %s", strategy)
	}
	cfg := goldfish.Config{Strategy: strategy, K: f.k, H: f.h, Start: f.start}
	if strategy == goldfish.Static {
		cfg.H = 0
	} else {
		cfg.Start = 0
	}
	m, err := goldfish.New(cfg)
	if err != nil {
		return err
	}
	var tok *tokenizer.Tokenizer
	if f.tokenizer != "" {
		if tok, _, err = openTokenizer(f.tokenizer); err != nil {
			return err
		}
	}
	in, name := cmd.InOrStdin(), "stdin"
	if f.input != "" {
		file, err := inputfile.Open(f.input)
		if err != nil {
			return fmt.Errorf("goldfish: %w", err)
		}
		defer file.Close()
		in, name = file, f.input
	}
	out := bufio.NewWriterSize(cmd.OutOrStdout(), 1<<20)
	hl := goldfish.Brackets
	if f.show && isTerminal(cmd.OutOrStdout()) {
		hl = goldfish.ReverseVideo
	}
	// The ids are shown as numbers without a tokenizer (a nil Decoder).
	var dec goldfish.Decoder
	if tok != nil {
		dec = tok
	}

	var lines, targets, dropped int64
	var buf []byte
	err = data.ReadLines(in, 0, func(line []byte, n int64) error {
		ids, err := goldfishIDs(line, n, f, tok)
		if err != nil {
			return err
		}
		drop, t, d := m.Drops(ids, f.asTargets)
		lines++
		targets += int64(t)
		dropped += int64(d)
		if f.show {
			buf = goldfish.AppendShown(buf[:0], dec, ids, drop, hl)
		} else {
			buf = goldfish.AppendJSON(buf[:0], ids, drop, d, t)
		}
		buf = append(buf, '\n')
		_, err = out.Write(buf)
		return err
	})
	if err := inputErr("goldfish", name, err); err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if f.show {
		frac := 0.0
		if targets > 0 {
			frac = float64(dropped) / float64(targets)
		}
		plural := "s"
		if lines == 1 {
			plural = ""
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "goldfish: %v: dropped %d of %d targets (%.2f%%; 1/k = %.2f%%) on %d line%s\n",
			cfg, dropped, targets, 100*frac, 100/float64(f.k), lines, plural)
	}
	return nil
}

// goldfishIDs returns the token ids of one JSONL line: its "ids" or
// "input_ids", or its text field encoded.
func goldfishIDs(line []byte, n int64, f goldfishFlags, tok *tokenizer.Tokenizer) ([]int32, error) {
	ids, text, isText, err := data.ParseIDsOrText(line, f.field)
	if err != nil {
		return nil, &data.LineError{Line: n, Err: err}
	}
	if !isText {
		return ids, nil
	}
	if tok == nil {
		return nil, &data.LineError{Line: n, Err: errors.New("a text line needs --tokenizer")}
	}
	ids, err = tok.EncodeChecked(text, tokenizer.EncodeOptions{AddSpecial: f.bos})
	if err != nil {
		return nil, &data.LineError{Line: n, Err: err}
	}
	return ids, nil
}
