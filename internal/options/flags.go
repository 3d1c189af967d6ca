package options

import (
	"fmt"
	"github.com/memtrain/memtrain/internal/choice"
	"reflect"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// flagValue is a leaf field as a pflag.Value.
type flagValue struct{ v reflect.Value }

func (f flagValue) String() string     { return stringOf(f.v) }
func (f flagValue) Set(s string) error { return setString(f.v, s) }
func (f flagValue) Type() string {
	if reflect.PointerTo(f.v.Type()).Implements(textUnmarshaler) {
		return strings.ToLower(f.v.Type().Name())
	}
	switch f.v.Kind() {
	case reflect.Float64:
		return "float"
	case reflect.Int, reflect.Int64:
		return "int"
	case reflect.Uint64:
		return "uint"
	}
	if f.v.Kind() == reflect.String && f.v.Type().PkgPath() == "" {
		return "string"
	}
	return strings.ToLower(f.v.Type().Name())
}

// A NoOptValuer is a leaf whose flag may be given without a value, as a
// bool's may (--flag is --flag=true): the flag alone sets NoOptValue,
// such as a mode that was once a switch.
type NoOptValuer interface{ NoOptValue() string }

// Bind registers a flag for every leaf field of the struct v points to,
// named Field.Flag, with the field's help and its current value as the
// default shown. Parsing the command line sets the fields of v; Apply
// copies the flags the user gave onto another value.
func Bind(fl *pflag.FlagSet, v any) {
	for _, f := range Fields(v) {
		fv := flagValue{f.value(v)}
		flag := fl.VarPF(fv, f.Flag(), "", f.Help)
		if fv.v.Kind() == reflect.Bool {
			flag.NoOptDefVal = "true"
		}
		if n, ok := fv.v.Interface().(NoOptValuer); ok {
			flag.NoOptDefVal = n.NoOptValue()
		}
	}
}

// Apply sets every field of the struct dst points to whose flag (bound by
// Bind on a value of the same type) the user gave, so that flags override
// a configuration read from a file.
func Apply(fl *pflag.FlagSet, dst any) error {
	for _, f := range Fields(dst) {
		flag := fl.Lookup(f.Flag())
		if flag == nil || !flag.Changed {
			continue
		}
		if err := setString(f.value(dst), flag.Value.String()); err != nil {
			return fmt.Errorf("--%s: %w", f.Flag(), err)
		}
	}
	return nil
}

// Normalize is a pflag normalization function that makes the snake_case
// spelling of a flag an alias of its kebab-case name.
func Normalize(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
}

// Suggest returns the known name nearest to an unknown one (a flag or a
// key, in either spelling), or "" when none is near: first a name whose
// last dotted part is the unknown name (lr → schedule.lr), then the one
// fewest edits away.
func Suggest(name string, known []string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "_", "-") }
	name = norm(name)
	if name == "" {
		return ""
	}
	sorted := append([]string(nil), known...)
	sort.Strings(sorted)
	last := func(s string) string { return s[strings.LastIndexByte(s, '.')+1:] }
	for _, k := range sorted {
		if k != name && last(norm(k)) == last(name) {
			return k
		}
	}
	// Near: at most two edits (a third of a long name), and fewer than
	// the name's length, so that nothing is suggested for anything.
	best, bestD := "", min(max(2, len(name)/3), len(name)-1)+1
	for _, k := range sorted {
		for _, cand := range []string{norm(k), last(norm(k))} {
			if d := choice.Distance(name, cand); d < bestD {
				best, bestD = k, d
			}
		}
	}
	return best
}

// FlagNames lists the names of a flag set's flags.
func FlagNames(fl *pflag.FlagSet) []string {
	var names []string
	fl.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	return names
}
