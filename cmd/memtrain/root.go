package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memtrain/memtrain/internal/options"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "memtrain",
		Short: "Fine-tune Llama checkpoints and measure their memorization",
		Long: `memtrain fine-tunes Llama-class checkpoints in HuggingFace layout, from a tiny
model on a laptop CPU up to 4D-parallel runs, optionally with the goldfish loss
that prevents verbatim memorization, and measures exact-match extraction.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	root.AddCommand(
		newInitCmd(),
		newDownloadCmd(),
		newInspectCmd(),
		newExportCmd(),
		newMergeCmd(),
		newEvalCmd(),
		newGenerateCmd(),
		newFinetuneCmd(),
		newTokenizeCmd(),
		newDataCmd(),
		newGoldfishCmd(),
		newVersionCmd(),
		newBenchCmd(),
		newExperimentCmd(),
		newDemoCmd(),
		newPlanCmd(),
	)
	// Flags are kebab-case; the YAML spelling (--max_steps) is an alias.
	root.SetGlobalNormalizationFunc(options.Normalize)
	root.SetFlagErrorFunc(flagError)
	return root
}

// wantNumber says what a numeric flag of each pflag type takes.
var wantNumber = map[string]string{
	"int": "want an integer", "int64": "want an integer", "uint64": "want an integer of 0 or more",
	"float64": "want a number", "bool": "want true or false",
}

var unknownFlag = regexp.MustCompile(`^unknown flag: --(\S+)$`)

// flagError names the nearest known flag of an unknown one, matching its
// last dotted part first (--lr: --schedule.lr).
//
// A value a flag refuses (options.IntRange's bounds, a number that does not
// parse) is said as the commands say their other errors: "bench step:
// --batch 0: want 1 to 1000000000".
func flagError(c *cobra.Command, err error) error {
	var iv *pflag.InvalidValueError
	if errors.As(err, &iv) {
		name, _ := strings.CutPrefix(c.CommandPath(), c.Root().Name()+" ")
		cause := iv.Unwrap()
		if want, ok := wantNumber[iv.GetFlag().Value.Type()]; ok && errors.As(cause, new(*strconv.NumError)) {
			cause = errors.New(want)
		}
		return fmt.Errorf("%s: --%s %s: %w", name, iv.GetFlag().Name, iv.GetValue(), cause)
	}
	m := unknownFlag.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	name, _, _ := strings.Cut(m[1], "=")
	if s := options.Suggest(name, options.FlagNames(c.Flags())); s != "" {
		return fmt.Errorf("unknown flag --%s; did you mean --%s?", name, s)
	}
	return fmt.Errorf("unknown flag --%s (%s --help lists them)", name, c.CommandPath())
}
