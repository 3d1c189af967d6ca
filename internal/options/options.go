// Package options declares a configuration once — a struct whose fields
// carry their key, default and help in tags — and derives from it what
// every configuration needs:
//
//   - defaults (SetDefaults, from `default:"…"`);
//   - command-line flags (Bind, Apply): one per leaf field, named by its
//     key path in kebab-case, nested keys dotted (--max-steps,
//     --goldfish.k, --optimizer.weight-decay), help from `help:"…"`;
//     Normalize makes the snake_case spelling (--max_steps) an alias, and
//     Suggest names the nearest flag for an unknown one;
//   - a strict YAML decoder (Decode, DecodeNode) that applies a file, or a
//     node of one (an experiment arm's overrides), onto a struct that
//     keeps the fields the YAML does not set, and names the file, line and
//     key as written of anything wrong: an unknown key (with the nearest
//     known one), a value of the wrong type. Keys are matched in either
//     spelling (max_steps or max-steps), so that files, flags and
//     overrides share one vocabulary;
//   - a digest of the fields tagged `resume:"same"` (Digest), which a
//     resumed run must share with the run it continues;
//   - the reference of every key (Fields), from which the README's tables
//     are generated.
//
// Keys come from the `yaml` tag, else the `json` tag, else the field's
// name in lower case, as go.yaml.in/yaml/v3 names them. A field tagged
// `yaml:"-"` is not configuration. Leaf fields are strings, booleans,
// integers, floats, and types that implement encoding.TextUnmarshaler
// (enumerations such as goldfish.Strategy).
package options

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/memtrain/memtrain/internal/units"
)

// A Field is one leaf of a configuration.
type Field struct {
	Key     string // its key path, YAML spelling: optimizer.weight_decay
	Help    string
	Default string // the `default` tag, as written ("" when none)
	Resume  bool   // tagged resume:"same"
	Type    reflect.Type
	index   []int
}

// Flag is the field's flag name: the key path in kebab-case.
func (f Field) Flag() string { return FlagName(f.Key) }

// FlagName is a key path in kebab-case: max_steps → max-steps.
func FlagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// isLeaf says whether t is configured as one value.
func isLeaf(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Uint64, reflect.Float64:
		return true
	}
	return false
}

// keyOf is a struct field's key, or "" for a field that is not
// configuration.
func keyOf(sf reflect.StructField) string {
	if !sf.IsExported() {
		return ""
	}
	for _, tag := range []string{"yaml", "json"} {
		if v, ok := sf.Tag.Lookup(tag); ok {
			name, _, _ := strings.Cut(v, ",")
			if name == "-" {
				return ""
			}
			if name != "" {
				return name
			}
		}
	}
	return strings.ToLower(sf.Name)
}

// Fields lists the leaves of a struct type (or a pointer to one) in
// declaration order, nested structs depth first.
func Fields(v any) []Field {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []Field
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			key := keyOf(sf)
			if key == "" {
				continue
			}
			if sf.Type == nodeType {
				continue // a YAML node is configured in files only
			}
			idx := append(append([]int(nil), index...), i)
			path := prefix + key
			if sf.Type.Kind() == reflect.Struct && !isLeaf(sf.Type) {
				walk(sf.Type, path+".", idx)
				continue
			}
			if !isLeaf(sf.Type) {
				continue // lists and nodes are configured in files only
			}
			out = append(out, Field{Key: path, Help: sf.Tag.Get("help"), Default: sf.Tag.Get("default"),
				Resume: sf.Tag.Get("resume") == "same", Type: sf.Type, index: idx})
		}
	}
	walk(t, "", nil)
	return out
}

// value is the field f of the struct v points to.
func (f Field) value(v any) reflect.Value {
	return reflect.ValueOf(v).Elem().FieldByIndex(f.index)
}

// setString sets a leaf from its text form.
func setString(v reflect.Value, s string) error {
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(s))
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if errors.Is(err, strconv.ErrRange) || err == nil && v.OverflowInt(n) {
			return fmt.Errorf("%q is out of range (want an integer from %d to %d)", s, minInt(v), -(minInt(v) + 1))
		}
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		v.SetInt(n)
	case reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, 64)
		if errors.Is(err, strconv.ErrRange) {
			return fmt.Errorf("%q is out of range (want an integer from 0 to %d)", s, uint64(math.MaxUint64))
		}
		if err != nil {
			return fmt.Errorf("%q is not a non-negative integer", s)
		}
		v.SetUint(n)
	case reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		v.SetFloat(x)
	default:
		return fmt.Errorf("options: cannot set a %v", v.Type())
	}
	return nil
}

// minInt is the smallest value of a signed integer leaf.
func minInt(v reflect.Value) int64 { return -1 << (v.Type().Bits() - 1) }

// stringOf is a leaf's text form.
func stringOf(v reflect.Value) string {
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		if b, err := m.MarshalText(); err == nil {
			return string(b)
		}
	}
	switch v.Kind() {
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// MaxInt is the largest integer leaf of a configuration (CheckNumbers):
// units.MaxCount, 10⁹ — a count, size or step beyond any run, which a
// product of two of them cannot overflow.
const MaxInt = units.MaxCount

// CheckNumbers refuses what no number of a configuration may be: a float
// leaf that is NaN or infinite, and an integer leaf below zero or above
// MaxInt (counts, sizes and steps, 0 meaning "none" or "the default"). The
// error names the first such field by its key path: "schedule.min_lr: NaN
// (want a finite number)", "max_steps: -3 (want 0 or more)", "epochs:
// 4611686018427387905 (want 0 to 1000000000)". Rules of a field's own (a
// positive batch size, a rate below 1, a tighter bound) are its owner's
// to check.
func CheckNumbers(v any) error {
	for _, f := range Fields(v) {
		fv := f.value(v)
		if reflect.PointerTo(fv.Type()).Implements(textUnmarshaler) {
			continue
		}
		switch fv.Kind() {
		case reflect.Float64:
			if x := fv.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("%s: %v (want a finite number)", f.Key, x)
			}
		case reflect.Int, reflect.Int64:
			if n := fv.Int(); n < 0 {
				return fmt.Errorf("%s: %d (want 0 or more)", f.Key, n)
			} else if n > MaxInt {
				return fmt.Errorf("%s: %d (want 0 to %d)", f.Key, n, MaxInt)
			}
		}
	}
	return nil
}

// SetDefaults sets every field of the struct v points to that has a
// `default` tag. A tag that does not parse is a programming error, which
// the package's own test of each configuration catches; it panics.
func SetDefaults(v any) {
	for _, f := range Fields(v) {
		if f.Default == "" {
			continue
		}
		if err := setString(f.value(v), f.Default); err != nil {
			panic(fmt.Sprintf("options: %s: default %q: %v", f.Key, f.Default, err))
		}
	}
}

// A Value is one field of a configuration as Values reports it.
type Value struct {
	Key    string // the key path, "schedule.lr"
	Value  string // as a flag prints it
	Resume bool   // tagged resume:"same"
}

// Values returns every field of v with its value as a flag prints it, in
// declaration order: what a run records of its configuration and compares
// with what it used before.
func Values(v any) []Value {
	var out []Value
	for _, f := range Fields(v) {
		out = append(out, Value{Key: f.Key, Value: stringOf(f.value(v)), Resume: f.Resume})
	}
	return out
}

// Digest identifies the values of the fields tagged resume:"same": a
// resumed run must have the same digest as the run it continues.
func Digest(v any) string {
	var parts []string
	for _, f := range Fields(v) {
		if f.Resume {
			parts = append(parts, f.Key+"="+stringOf(f.value(v)))
		}
	}
	b, _ := json.Marshal(parts)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Reference is the YAML reference of a configuration: every key with its
// default and its help as a comment, nested keys indented under their
// section, in declaration order (the README's tables are generated from
// it).
func Reference(v any) string {
	fields := Fields(v)
	var zero = reflect.New(reflect.TypeOf(v).Elem()).Interface()
	SetDefaults(zero)
	type line struct{ text, help string }
	var lines []line
	section := ""
	for _, f := range fields {
		parts := strings.Split(f.Key, ".")
		if len(parts) > 1 && strings.Join(parts[:len(parts)-1], ".") != section {
			section = strings.Join(parts[:len(parts)-1], ".")
			lines = append(lines, line{text: strings.Repeat("  ", len(parts)-2) + parts[len(parts)-2] + ":"})
		} else if len(parts) == 1 {
			section = ""
		}
		val := stringOf(f.value(zero))
		if f.Type.Kind() == reflect.String && val == "" {
			val = `""`
		}
		lines = append(lines, line{strings.Repeat("  ", len(parts)-1) + parts[len(parts)-1] + ": " + val, f.Help})
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l.text))
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text)
		if l.help != "" {
			b.WriteString(strings.Repeat(" ", width-len(l.text)+2) + "# " + l.help)
		}
		b.WriteString("\n")
	}
	return b.String()
}
