// Command spearman compares measured training-step times with `memtrain
// plan --json`'s predictions and reports Spearman's rank correlation:
// whether the plan ranks the grids as the machine does.
//
//	go run ./scripts/spearman [-min R] -plan plan.json RUN...
//
// Each RUN is a `memtrain finetune` run folder named after its grid,
// "dp=D,x=X,y=Y,z=Z" (axes left out are 1). Its measured step time is the
// plan's global batch tokens ÷ the median tokens_per_s of its
// metrics.jsonl, the first step left out (it warms caches and pages in the
// weights). Several runs of one grid (in different folders) count as
// repeats, and the fastest is kept: on a shared machine other work only
// ever slows a run down, so the fastest repeat is the least disturbed.
// Grids the plan does not list are an error.
//
// It prints one line a grid (measured and predicted seconds, their ratio,
// and both ranks, 1 = fastest) and then "spearman R over N grids"; with
// -min it exits with status 1 when R is below it.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"

	"github.com/memtrain/memtrain/engine/perfmodel"
	"github.com/memtrain/memtrain/internal/stats"
)

// planFile is the part of `memtrain plan --json` read here.
type planFile struct {
	GlobalBatchTokens int64 `json:"global_batch_tokens"`
	Plans             []struct {
		Grid         perfmodel.Grid `json:"grid"`
		MicroBatch   int            `json:"micro_batch"`
		MicroBatches int            `json:"micro_batches"`
		StepSeconds  float64        `json:"step_seconds"`
	} `json:"plans"`
}

func main() {
	planPath := flag.String("plan", "", "`memtrain plan --json` output for the runs' model, ranks, batch and device")
	minR := flag.Float64("min", math.Inf(-1), "exit with status 1 when the correlation is below this")
	flag.Parse()
	if *planPath == "" || flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: spearman [-min R] -plan plan.json RUN RUN...")
		os.Exit(2)
	}
	r, err := run(*planPath, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "spearman:", err)
		os.Exit(1)
	}
	if r < *minR {
		fmt.Printf("spearman %.3f is below %g\n", r, *minR)
		os.Exit(1)
	}
}

func run(planPath string, runs []string) (float64, error) {
	raw, err := os.ReadFile(planPath)
	if err != nil {
		return 0, err
	}
	var plan planFile
	if err := json.Unmarshal(raw, &plan); err != nil {
		return 0, fmt.Errorf("%s: %w", planPath, err)
	}
	predicted := map[perfmodel.Grid]float64{}
	for _, p := range plan.Plans {
		predicted[p.Grid] = p.StepSeconds
	}
	var measured, pred []float64
	var names []string
	repeats := map[perfmodel.Grid]int{} // index into measured
	for _, dir := range runs {
		g, err := perfmodel.ParseGrid(filepath.Base(dir))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", dir, err)
		}
		p, ok := predicted[g]
		if !ok {
			return 0, fmt.Errorf("%s: the plan has no grid %v", dir, g)
		}
		tps, err := medianTokensPerSecond(dir)
		if err != nil {
			return 0, err
		}
		secs := float64(plan.GlobalBatchTokens) / tps
		if i, ok := repeats[g]; ok {
			measured[i] = min(measured[i], secs)
			continue
		}
		repeats[g] = len(measured)
		names = append(names, g.String())
		measured = append(measured, secs)
		pred = append(pred, p)
	}
	if len(names) < 2 {
		return 0, fmt.Errorf("%d grid(s): a rank correlation needs two or more", len(names))
	}
	rm, rp := ranks(measured), ranks(pred)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "grid\tmeasured s\tpredicted s\tpredicted/measured\trank measured\trank predicted\t")
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return measured[order[a]] < measured[order[b]] })
	for _, i := range order {
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.2f\t%g\t%g\t\n", names[i], measured[i], pred[i], pred[i]/measured[i], rm[i], rp[i])
	}
	if err := tw.Flush(); err != nil {
		return 0, err
	}
	r := pearson(rm, rp)
	fmt.Printf("spearman %.3f over %d grids\n", r, len(names))
	return r, nil
}

// medianTokensPerSecond is the median tokens_per_s of a run's steps after
// the first.
func medianTokensPerSecond(dir string) (float64, error) {
	path := filepath.Join(dir, "metrics.jsonl")
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var tps []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m struct {
			Step       int     `json:"step"`
			TokensPerS float64 `json:"tokens_per_s"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		if m.Step > 1 && m.TokensPerS > 0 {
			tps = append(tps, m.TokensPerS)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if len(tps) == 0 {
		return 0, fmt.Errorf("%s: no step after the first", path)
	}
	return stats.Median(tps), nil
}

// ranks gives each value its rank, 1 for the smallest; ties share the
// mean of their ranks, as Spearman's coefficient wants.
func ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return xs[idx[a]] < xs[idx[b]] })
	out := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && xs[idx[j+1]] == xs[idx[i]] {
			j++
		}
		mean := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			out[idx[k]] = mean
		}
		i = j + 1
	}
	return out
}

// pearson is the correlation coefficient of two equally long samples (of
// ranks: Spearman's), NaN when either is constant.
func pearson(a, b []float64) float64 {
	n := float64(len(a))
	var ma, mb float64
	for i := range a {
		ma += a[i]
		mb += b[i]
	}
	ma, mb = ma/n, mb/n
	var sab, saa, sbb float64
	for i := range a {
		sab += (a[i] - ma) * (b[i] - mb)
		saa += (a[i] - ma) * (a[i] - ma)
		sbb += (b[i] - mb) * (b[i] - mb)
	}
	return sab / math.Sqrt(saa*sbb)
}
