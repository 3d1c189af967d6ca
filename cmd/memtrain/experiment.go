package main

import (
	"errors"
	"strings"

	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/experiments"
	"github.com/memtrain/memtrain/experiments/report"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/stopsignal"
)

func newExperimentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "experiment",
		Short: "Run memorization studies from a YAML spec and report on them",
	}
	cmd.AddCommand(newExperimentRunCmd(), newExperimentReportCmd())
	return cmd
}

func newExperimentRunCmd() *cobra.Command {
	var (
		out    string
		strict bool
		ef     engineFlags
		pf     parallelFlags
	)
	cmd := &cobra.Command{
		Use:   "run SPEC.yaml --out DIR",
		Short: "Run every arm and seed of a study, resumably, and write its report",
		Long: `experiment run prepares the study's data (targets chosen from the corpus, held-out
controls that share no long token run with them), makes the base model (from a
checkpoint, or a preset initialised and pretrained), fine-tunes every arm for
every seed, evaluates each with the spec's protocols on the targets and the
held-out documents, and writes OUT/report.md, OUT/results.csv, OUT/documents.csv
(every document's outcome) and OUT/plots/.

It is resumable: run it again with the same --out and a finished base model,
arm or evaluation is not redone, an interrupted fine-tuning continues from its
last checkpoint. Every check that needs no training — the spec, its files, the
targets, the protocols against the documents — runs before any training.

See experiments/specs/ for examples (demo.yaml; size-study.yaml, the
"catastrophic memorization" study of models of increasing size).`,
		Example: `  memtrain experiment run experiments/specs/size-study.yaml --out size-study`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The flags are checked before the spec is read.
			if _, err := launchSpec(ef, pf); err != nil {
				return fmt.Errorf("experiment: %w", err)
			}
			spec, err := experiments.ReadSpec(args[0])
			if err != nil {
				return err
			}
			return runExperiment(cmd, spec, out, strict, ef, pf)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "", "output folder (created; an existing one is resumed)")
	fl.BoolVar(&strict, "strict", false, "fail when documents are too short for a protocol instead of skipping them")
	ef.register(fl)
	pf.register(fl)
	cmd.MarkFlagRequired("out")
	return cmd
}

func newExperimentReportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report DIR",
		Short: "Write report.md, results.csv, documents.csv and plots/ from a study's finished arms",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := experiments.WriteReport(args[0])
			if err != nil {
				return err
			}
			printReport(cmd.OutOrStdout(), rep)
			return nil
		},
	}
}

func newDemoCmd() *cobra.Command {
	var (
		out       string
		quick     bool
		printSpec bool
		ef        engineFlags
		pf        parallelFlags
	)
	cmd := &cobra.Command{
		Use:   "demo [--out DIR] [--quick]",
		Short: "Run the bundled study: goldfish loss vs standard loss on State of the Union passages",
		Long: `demo runs memtrain's main job on bundled data only: it creates a small Llama with
the Llama 2 tokenizer, pretrains it briefly on Jane Austen, fine-tunes it for
many epochs on 64 State of the Union passages with the standard loss and with
the goldfish loss (k = 4, hash-table, h = 13), measures verbatim extraction on
those passages and on 64 held-out passages, and writes the report
(OUT/report.md, results.csv, documents.csv, plots/). --quick runs a smaller study (16
passages) in about a minute. --print-spec prints the study's YAML, a starting
point for your own (memtrain experiment run).

Like experiment run, it resumes an interrupted run in the same --out.`,
		Example: `  memtrain demo
  memtrain demo --quick --out demo-quick
  memtrain demo --print-spec > my-study.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if printSpec {
				_, err := cmd.OutOrStdout().Write(experiments.DemoSpecYAML(quick))
				return err
			}
			spec, err := experiments.DemoSpec(quick)
			if err != nil {
				return err
			}
			if out == "" {
				out = "memtrain-demo"
				if quick {
					out = "memtrain-demo-quick"
				}
			}
			return runExperiment(cmd, spec, out, false, ef, pf)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "", "output folder (default memtrain-demo, or memtrain-demo-quick)")
	fl.BoolVar(&quick, "quick", false, "the small study: 16 passages, about a minute")
	fl.BoolVar(&printSpec, "print-spec", false, "print the study's YAML spec and exit")
	ef.register(fl)
	pf.register(fl)
	return cmd
}

func runExperiment(cmd *cobra.Command, spec *experiments.Spec, out string, strict bool, ef engineFlags, pf parallelFlags) error {
	// The base models are made by the study, so the grid is checked
	// against them there, before any training.
	ls, err := launchSpec(ef, pf)
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	start := time.Now()
	errw := cmd.ErrOrStderr()
	pb := &phaseBars{w: errw, show: isTerminal(errw)}
	stops := stopsignal.Start(cmd.ErrOrStderr())
	defer stops.Stop()
	r := &experiments.Runner{Spec: spec, Out: out, Launch: ls, Log: pb, Progress: pb.update, Strict: strict, Stop: stops.Requested, Version: version}
	rep, err := r.Run()
	pb.finish()
	var stopped *experiments.StoppedError
	if errors.As(err, &stopped) && stops.Signal() != nil {
		return &exitError{code: stopsignal.Exit(stops.Signal()), msg: fmt.Sprintf("%v (%v); continue with: %s", stopped, stops.Signal(), resumeCommand(cmd, out))}
	}
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	results, err := report.Load(out)
	if err != nil {
		return err
	}
	// The console shows report.md's tables: the same arms, order, units
	// and numbers.
	if err := report.WriteConsole(w, results); err != nil {
		return err
	}
	fmt.Fprintln(w)
	printReport(w, rep)
	fmt.Fprintf(w, "finished in %s\n", time.Since(start).Round(time.Second))
	return nil
}

func printReport(w io.Writer, rep *report.Written) {
	fmt.Fprintf(w, "report: %s (%d runs of %d arms", rep.Markdown, rep.Runs, rep.Arms)
	if rep.Unfinished > 0 {
		fmt.Fprintf(w, ", %d unfinished left out", rep.Unfinished)
	}
	fmt.Fprintf(w, "), %s, %s, %d plots in %s\n", filepath.Base(rep.CSV), filepath.Base(rep.Documents), len(rep.Plots), filepath.Join(filepath.Dir(rep.Markdown), report.PlotsDir))
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

// phaseBars shows one progress bar per phase of a study on a terminal, and
// its log lines above them (or only the log lines elsewhere).
type phaseBars struct {
	mu    sync.Mutex
	w     io.Writer
	show  bool
	phase string
	bar   *progressbar.ProgressBar
}

func (p *phaseBars) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Clear()
	}
	return p.w.Write(b)
}

func (p *phaseBars) update(ev experiments.Progress) {
	if !p.show {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.Phase != p.phase || p.bar == nil {
		if p.bar != nil {
			p.bar.Finish()
			fmt.Fprintln(p.w)
		}
		p.phase = ev.Phase
		p.bar = newBar(p.w, ev.Total, ev.Phase, ev.Unit)
	}
	if ev.Detail != "" {
		p.bar.Describe(ev.Phase + " " + ev.Detail)
	}
	p.bar.Set(ev.Done)
}

func (p *phaseBars) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish()
		fmt.Fprintln(p.w)
		p.bar = nil
	}
}

// resumeCommand is the command line that continues this study: the same
// one (a study resumes in its folder by design), with its output folder.
func resumeCommand(cmd *cobra.Command, out string) string {
	return options.CommandLine("memtrain "+strings.Join(strings.Fields(cmd.CommandPath())[1:], " "), cmd.Flags(), "out", out)
}
