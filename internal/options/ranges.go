package options

import (
	"fmt"
	"strconv"

	"github.com/spf13/pflag"
)

// An intRange is an integer flag whose value must lie in [lo, hi] — or be
// 0, when zero says what 0 means ("the default", "all") — checked as the
// flag is parsed, so that a command never holds a count out of range and
// the bounds are declared once, beside the flag.
type intRange struct {
	p      *int
	lo, hi int
	zero   string
}

func (r *intRange) String() string { return strconv.Itoa(*r.p) }
func (r *intRange) Type() string   { return "int" }

func (r *intRange) Set(s string) error {
	v, err := strconv.ParseInt(s, 0, strconv.IntSize)
	switch {
	case err != nil:
		return fmt.Errorf("want an integer from %s", r.bounds())
	case v == 0 && r.zero != "":
	case v < int64(r.lo) || v > int64(r.hi):
		return fmt.Errorf("want %s", r.bounds())
	}
	*r.p = int(v)
	return nil
}

func (r *intRange) bounds() string {
	if r.hi == r.lo+1 && r.zero == "" {
		return fmt.Sprintf("%d or %d", r.lo, r.hi)
	}
	if r.zero != "" {
		return fmt.Sprintf("%d to %d (0: %s)", r.lo, r.hi, r.zero)
	}
	return fmt.Sprintf("%d to %d", r.lo, r.hi)
}

// IntRange defines an integer flag of the given default whose values lie
// in [lo, hi], and 0 too where zero (what 0 means) is not empty. A value
// out of range is refused when the flags are parsed, with an error that
// states the range.
func IntRange(fl *pflag.FlagSet, p *int, name string, value, lo, hi int, zero, usage string) {
	*p = value
	fl.Var(&intRange{p: p, lo: lo, hi: hi, zero: zero}, name, usage)
}
