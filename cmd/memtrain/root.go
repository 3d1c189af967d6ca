package main

import (
	"github.com/spf13/cobra"
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
	return root
}
