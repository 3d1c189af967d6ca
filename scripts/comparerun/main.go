// Command comparerun checks that two fine-tuning runs of `memtrain
// finetune` computed the same thing: the per-step losses of their
// metrics.jsonl, and the weights of their latest checkpoints. A run on a
// grid of ranks (in-process or under mpirun) must equal the run on one
// rank up to float32 rounding, whose summation order differs.
//
//	go run ./scripts/comparerun [-loss-tol 1e-5] [-weight-tol 1e-5] REF RUN...
//
// For every RUN it prints one line per check and exits with status 1 if
// any run differs from REF by more than the tolerances: a step's
// |loss − ref| / |ref| above -loss-tol, a step missing on either side, or
// a weight tensor with ‖W − W_ref‖ / ‖W_ref‖ above -weight-tol (computed
// in float64 per tensor, so that a small tensor such as a norm weight is
// not hidden by the embedding's norm).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/finetune"
)

func main() {
	lossTol := flag.Float64("loss-tol", 1e-5, "largest relative difference of a step's loss")
	weightTol := flag.Float64("weight-tol", 1e-5, "largest ‖ΔW‖/‖W‖ of a weight tensor")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: comparerun [-loss-tol T] [-weight-tol T] REF RUN...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 {
		flag.Usage()
		os.Exit(2)
	}
	ref := flag.Arg(0)
	failed := false
	for _, run := range flag.Args()[1:] {
		if err := compare(ref, run, *lossTol, *weightTol); err != nil {
			fmt.Printf("FAIL %s vs %s: %v\n", run, ref, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func compare(ref, run string, lossTol, weightTol float64) error {
	a, err := losses(ref)
	if err != nil {
		return err
	}
	b, err := losses(run)
	if err != nil {
		return err
	}
	if len(a) != len(b) {
		return fmt.Errorf("%d steps in %s, %d in %s", len(a), ref, len(b), run)
	}
	worstLoss := 0.0
	for i := range a {
		if a[i].step != b[i].step {
			return fmt.Errorf("line %d: step %d in %s, step %d in %s", i+1, a[i].step, ref, b[i].step, run)
		}
		d := math.Abs(b[i].loss-a[i].loss) / math.Abs(a[i].loss)
		if !(d <= lossTol) { // NaN fails too
			return fmt.Errorf("step %d: loss %.9g, reference %.9g: relative difference %.3g > %g", a[i].step, b[i].loss, a[i].loss, d, lossTol)
		}
		worstLoss = max(worstLoss, d)
	}
	worstW, name, err := weights(ref, run, weightTol)
	if err != nil {
		return err
	}
	fmt.Printf("ok   %s vs %s: %d steps, largest loss difference %.2g (relative); largest ‖ΔW‖/‖W‖ %.2g (%s)\n",
		run, ref, len(a), worstLoss, worstW, name)
	return nil
}

type stepLoss struct {
	step int
	loss float64
}

// losses reads the steps and losses of run/metrics.jsonl.
func losses(run string) ([]stepLoss, error) {
	path := filepath.Join(run, "metrics.jsonl")
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []stepLoss
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		var m finetune.Metrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, stepLoss{m.Step, m.Loss})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no steps", path)
	}
	return out, nil
}

// weights compares the latest checkpoints of two runs tensor by tensor and
// returns the largest relative difference and the tensor it was found in.
func weights(ref, run string, tol float64) (float64, string, error) {
	open := func(dir string) (*checkpoints.Checkpoint, error) {
		path, err := finetune.LatestCheckpoint(filepath.Join(dir, "checkpoints"))
		if err != nil {
			return nil, err
		}
		return checkpoints.Open(path)
	}
	a, err := open(ref)
	if err != nil {
		return 0, "", err
	}
	defer a.Close()
	b, err := open(run)
	if err != nil {
		return 0, "", err
	}
	defer b.Close()
	worst, worstName := 0.0, ""
	for _, s := range a.Config.TensorSpecs() {
		wa, err := a.Weights.ReadFloat32(s.Name)
		if err != nil {
			return 0, "", err
		}
		wb, err := b.Weights.ReadFloat32(s.Name)
		if err != nil {
			return 0, "", err
		}
		if len(wa) != len(wb) {
			return 0, "", fmt.Errorf("%s: %d elements in %s, %d in %s", s.Name, len(wa), ref, len(wb), run)
		}
		var diff, norm float64
		for i := range wa {
			d := float64(wb[i]) - float64(wa[i])
			diff += d * d
			norm += float64(wa[i]) * float64(wa[i])
		}
		if norm == 0 {
			return 0, "", errors.New(s.Name + ": the reference's weights are all zero")
		}
		r := math.Sqrt(diff / norm)
		if !(r <= tol) {
			return 0, "", fmt.Errorf("%s: ‖ΔW‖/‖W‖ = %.3g > %g", s.Name, r, tol)
		}
		if r >= worst {
			worst, worstName = r, s.Name
		}
	}
	return worst, worstName, nil
}
