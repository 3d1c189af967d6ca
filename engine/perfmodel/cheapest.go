package perfmodel

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/engine"
)

// A Choice is what Choose found: the job it planned (with Cheapest, the
// fewest GPUs that fit and their batch), the options (with Cheapest, the
// state options it chose), and the grids with them, fastest first
// (Search's plans).
type Choice struct {
	Job     Job
	Options Options
	Plans   []Plan
}

// Choose plans j: Cheapest when o.Cheapest is set, else Search on j as
// given (whose GlobalBatchTokens 0 is one sequence a GPU).
func Choose(j Job, o Options) (Choice, error) {
	if o.Cheapest {
		return Cheapest(j, o)
	}
	if j.GlobalBatchTokens == 0 {
		j.GlobalBatchTokens = int64(j.GPUs) * int64(j.SeqLen)
	}
	plans, err := Search(j, o)
	return Choice{Job: j, Options: o, Plans: plans}, err
}

// Cheapest searches the optimizer-state options as well as the grids:
// ZeRO 0 and 1, the split master (in mixed precision, without adapters)
// or not, float32, bf16 or 8-bit moments (the last without ZeRO), the
// optimizer fused into the backward or not (without ZeRO or adapters;
// exact, but a second pass: the faster step wins when both fit), each
// with Search's grids, micro-batches and recomputation, on at most
// j.GPUs devices. It returns the fewest GPUs (the powers of two below
// j.GPUs, then j.GPUs) on which some option set fits; of the option
// sets that fit there, the most exact first — float32 moments, then
// bf16, then 8-bit, for compact moments round (stochastically) where the
// split master and ZeRO change no bit — then the fastest step.
// o's state options are replaced; the rest (precision, recomputation,
// overlap, adapters, …) hold for every try. With j.GlobalBatchTokens 0
// each count trains one sequence a GPU. When nothing fits it returns
// j.GPUs's most frugal option set's *NoFitError.
func Cheapest(j Job, o Options) (Choice, error) {
	if j.GPUs < 1 {
		return Choice{}, fmt.Errorf("perfmodel: gpus must be positive, got %d", j.GPUs)
	}
	var counts []int
	for n := 1; n < j.GPUs; n *= 2 {
		counts = append(counts, n)
	}
	counts = append(counts, j.GPUs)
	var lastErr error
	for _, n := range counts {
		jn := j
		jn.GPUs = n
		if j.GlobalBatchTokens == 0 {
			jn.GlobalBatchTokens = int64(n) * int64(j.SeqLen)
		}
		var best *Choice
		for _, v := range stateOptions(o) {
			plans, err := Search(jn, v)
			if err != nil {
				lastErr = frugal(lastErr, err)
				continue
			}
			c := Choice{Job: jn, Options: v, Plans: plans}
			if best == nil || better(c, *best) {
				best = &c
			}
		}
		if best != nil {
			return *best, nil
		}
		if n == j.GPUs {
			break
		}
		lastErr = nil // only j.GPUs's shortfall is reported
	}
	return Choice{}, lastErr
}

// stateOptions are o with each combination of the state options.
func stateOptions(o Options) []Options {
	splits := []bool{false}
	if o.Precision == engine.PrecisionBF16 && o.LoRA == 0 {
		splits = append(splits, true)
	}
	fused := []bool{false}
	if o.LoRA == 0 {
		fused = append(fused, true)
	}
	var out []Options
	for _, zero := range []int{0, 1} {
		for _, split := range splits {
			for _, m := range []engine.DType{engine.F32, engine.BF16, engine.I8} {
				for _, f := range fused {
					if m == engine.I8 && zero != 0 || f && zero != 0 {
						continue
					}
					v := o
					v.Zero, v.SplitMaster, v.Moments, v.Fused = zero, split, m, f
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// better reports whether c is to be chosen over d at the same GPUs: the
// wider moments first (float32, bf16, 8-bit), then the faster step.
func better(c, d Choice) bool {
	if cs, ds := c.Options.Moments.Size(), d.Options.Moments.Size(); cs != ds {
		return cs > ds
	}
	return c.Plans[0].StepSeconds < d.Plans[0].StepSeconds
}

// frugal keeps, of two Search errors, the no-fit one whose smallest
// candidate needs the least memory (any error before none).
func frugal(a, b error) error {
	var na, nb *NoFitError
	if !errors.As(b, &nb) {
		if a == nil {
			return b
		}
		return a
	}
	if errors.As(a, &na) && na.Smallest.Memory.Total() <= nb.Smallest.Memory.Total() {
		return a
	}
	return b
}
