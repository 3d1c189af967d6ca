package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

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

var unknownFlag = regexp.MustCompile(`^unknown flag: --(\S+)$`)

// flagError names the nearest known flag of an unknown one, matching its
// last dotted part first (--lr: --schedule.lr).
func flagError(c *cobra.Command, err error) error {
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
