package main

import (
	"errors"
	"fmt"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memtrain/memtrain/checkpoints/hub"
	"github.com/memtrain/memtrain/finetune"
)

func newDownloadCmd() *cobra.Command {
	var opt hub.Options
	var token string
	cmd := &cobra.Command{
		Use:   "download REPO [FILES...] [--revision REV] [--include GLOB] [--exclude GLOB]",
		Short: "Download a model from the Hugging Face Hub into its local cache",
		Long: `download fetches a model repo's files at a revision into huggingface_hub's cache
($HF_HUB_CACHE, or $HF_HOME/hub: ~/.cache/huggingface/hub), reusing what is there,
checked against the Hub's hashes, resuming an interrupted download, and prints the
snapshot folder. By default it takes what a fine-tune reads: config, tokenizer and
safetensors files. $HF_ENDPOINT names a mirror; gated repos need a token.`,
		Example: "  memtrain download TinyLlama/TinyLlama-1.1B-Chat-v1.0\n  memtrain download meta-llama/Llama-3.2-1B --include 'original/*'",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt.Files = args[1:]
			dir, err := hubDownload(cmd, args[0], opt, token)
			if err != nil {
				return fmt.Errorf("download: %w", hubHint(err))
			}
			fmt.Fprintln(cmd.OutOrStdout(), dir)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opt.Revision, "revision", hub.DefaultRevision, "branch, tag or commit")
	fl.StringArrayVar(&opt.Include, "include", nil, "glob of files to take besides the defaults (repeatable; * matches / too)")
	fl.StringArrayVar(&opt.Exclude, "exclude", nil, "glob of files to leave out (repeatable)")
	fl.StringVar(&token, "token", "", "access token of a gated or private repo (default $HF_TOKEN)")
	return cmd
}

// hubDownload downloads repo into the cache, with a bar of bytes on a
// terminal, and returns its snapshot folder.
func hubDownload(cmd *cobra.Command, repo string, opt hub.Options, token string) (string, error) {
	cache, err := hub.DefaultCache()
	if err != nil {
		return "", err
	}
	c := hub.EnvClient(token)
	p, err := c.Plan(cmd.Context(), cache, repo, opt)
	if err != nil {
		return "", err
	}
	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "memtrain: %s at %s (commit %s): %d files, %d to fetch, %.1f MB\n", repo, p.Revision, p.Commit[:12], len(p.Files), len(p.Fetch), float64(p.Bytes())/1e6)
	var progress func(int64)
	if isTerminal(stderr) && p.Bytes() > 0 {
		bar := progressbar.NewOptions64(p.Bytes(), progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("download"),
			progressbar.OptionShowBytes(true), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true))
		progress = func(n int64) { bar.Add64(n) }
		defer fmt.Fprintln(stderr) // the bar ends its line, where it stopped
	}
	return p.Snapshot(), c.Download(cmd.Context(), p, hub.DefaultWorkers, progress)
}

// downloadFlag defines a command's --download, fetchModel's consent.
func downloadFlag(fl *pflag.FlagSet, p *bool) {
	fl.BoolVar(p, "download", false, "download a Hub model (--model NAMESPACE/NAME[@REVISION]) missing from the cache")
}

// fetchModel downloads the Hub model that model names when --download
// consents and neither a local path nor the cache has it.
func fetchModel(cmd *cobra.Command, consent bool, model string) error {
	repo, rev, ok := hub.ParseModelRef(model)
	if _, _, err := finetune.ResolvePath(model); !consent || !ok || err == nil {
		return nil // not asked, not a Hub model, or here already
	}
	_, err := hubDownload(cmd, repo, hub.Options{Revision: rev}, "")
	return hubHint(err)
}

// hubHint adds to a Hub error the flags that answer it.
func hubHint(err error) error {
	var nc *hub.NotCachedError
	var ae *hub.AccessError
	switch {
	case errors.As(err, &nc):
		return fmt.Errorf("%w; get it with: memtrain download %s --revision %s (or give --download)", err, nc.Repo, nc.Revision)
	case errors.As(err, &ae):
		return fmt.Errorf("%w (--token or $HF_TOKEN)", err)
	case errors.Is(err, hub.ErrNothingSelected):
		return fmt.Errorf("%w; --include GLOB takes other files", err)
	}
	return err
}
