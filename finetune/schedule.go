package finetune

import (
	"fmt"
	"math"
)

// Schedule gives the learning rate of each optimizer step.
type Schedule struct {
	Kind   string  `yaml:"kind" json:"kind" default:"cosine" resume:"same" help:"learning-rate schedule after warm-up: constant, cosine or linear"`
	LR     float64 `yaml:"lr" json:"lr" default:"1e-4" help:"peak learning rate"`
	MinLR  float64 `yaml:"min_lr" json:"min_lr" default:"1e-5" help:"learning rate at the end of the decay"`
	Warmup int     `yaml:"warmup" json:"warmup" help:"steps of linear warm-up from lr/warmup to lr"`
	Total  int     `yaml:"total" json:"total" help:"steps of the decay (0: the run's length)"`
}

// Validate checks the schedule.
func (s Schedule) Validate() error {
	switch s.Kind {
	case "constant", "cosine", "linear":
	default:
		return fmt.Errorf("finetune: schedule %q (want constant, cosine or linear)", s.Kind)
	}
	if !(s.LR > 0) || math.IsInf(s.LR, 0) {
		return fmt.Errorf("finetune: learning rate %v (want a positive number)", s.LR)
	}
	if s.MinLR < 0 || s.MinLR > s.LR {
		return fmt.Errorf("finetune: min learning rate %v (want 0 ≤ min ≤ %v)", s.MinLR, s.LR)
	}
	if s.Warmup < 0 {
		return fmt.Errorf("finetune: warm-up %d steps (want ≥ 0)", s.Warmup)
	}
	if s.Kind != "constant" && s.Total <= s.Warmup {
		return fmt.Errorf("finetune: %s decay needs more steps (%d) than warm-up (%d)", s.Kind, s.Total, s.Warmup)
	}
	return nil
}

// At returns the learning rate of step (counting from 0): linear warm-up
// over the first Warmup steps, then constant, or a cosine or linear decay
// from LR to MinLR at step Total.
func (s Schedule) At(step int) float64 {
	if step < s.Warmup {
		return s.LR * float64(step+1) / float64(s.Warmup)
	}
	if s.Kind == "constant" {
		return s.LR
	}
	p := float64(step-s.Warmup) / float64(s.Total-s.Warmup)
	p = math.Min(math.Max(p, 0), 1)
	if s.Kind == "linear" {
		return s.LR - (s.LR-s.MinLR)*p
	}
	return s.MinLR + (s.LR-s.MinLR)*0.5*(1+math.Cos(math.Pi*p))
}
