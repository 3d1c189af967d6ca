package options

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// color is an enumeration configured by name.
type color int

func (c color) MarshalText() ([]byte, error) { return []byte([]string{"red", "blue"}[c]), nil }
func (c *color) UnmarshalText(b []byte) error {
	switch string(b) {
	case "red":
		*c = 0
	case "blue":
		*c = 1
	default:
		return fmt.Errorf("unknown color %q", b)
	}
	return nil
}

type inner struct {
	Rate  float64 `yaml:"rate" default:"0.5" help:"a rate"`
	Color color   `yaml:"color" default:"blue" resume:"same"`
}

type config struct {
	Name     string    `yaml:"name" resume:"same" help:"a name"`
	MaxSteps int       `yaml:"max_steps" default:"10"`
	Seed     uint64    `yaml:"seed"`
	On       bool      `yaml:"on" default:"true"`
	Inner    inner     `yaml:"inner"`
	Tags     []string  `yaml:"tags"`  // files only
	Seeds    []uint64  `yaml:"seeds"` // files only
	Node     yaml.Node `yaml:"node"`  // files only
	Skip     int       `yaml:"-"`
	hidden   int
}

func TestFields(t *testing.T) {
	var keys, flags []string
	for _, f := range Fields(&config{}) {
		keys, flags = append(keys, f.Key), append(flags, f.Flag())
	}
	if got, want := strings.Join(keys, " "), "name max_steps seed on inner.rate inner.color"; got != want {
		t.Errorf("keys %q, want %q", got, want)
	}
	if got, want := strings.Join(flags, " "), "name max-steps seed on inner.rate inner.color"; got != want {
		t.Errorf("flags %q, want %q", got, want)
	}
}

func TestSetDefaultsAndDigest(t *testing.T) {
	var c config
	SetDefaults(&c)
	if want := (config{MaxSteps: 10, On: true, Inner: inner{Rate: 0.5, Color: 1}}); fmt.Sprint(c) != fmt.Sprint(want) {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
	d := Digest(&c)
	c.MaxSteps, c.Inner.Rate = 99, 0.1 // not resume:"same"
	if Digest(&c) != d {
		t.Error("the digest changed with a field not tagged resume")
	}
	c.Inner.Color = 0
	if Digest(&c) == d {
		t.Error("the digest did not change with a resume field")
	}
}

func TestFlags(t *testing.T) {
	var bound config
	SetDefaults(&bound)
	fl := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fl.SetNormalizeFunc(Normalize)
	Bind(fl, &bound)
	if err := fl.Parse([]string{"--max_steps", "3", "--inner.color=red", "--on=false", "--name", "x"}); err != nil {
		t.Fatal(err)
	}
	// A configuration from a file, which the flags override.
	file := config{MaxSteps: 7, Seed: 5, On: true, Inner: inner{Rate: 2, Color: 1}}
	if err := Apply(fl, &file); err != nil {
		t.Fatal(err)
	}
	if want := (config{Name: "x", MaxSteps: 3, Seed: 5, Inner: inner{Rate: 2}}); fmt.Sprint(file) != fmt.Sprint(want) {
		t.Errorf("after flags %+v, want %+v", file, want)
	}
	if f := fl.Lookup("inner.color"); f == nil || f.Value.Type() != "color" || f.DefValue != "blue" {
		t.Errorf("inner.color flag %+v", f)
	}
	if err := fl.Parse([]string{"--inner.color", "green"}); err == nil || !strings.Contains(err.Error(), `unknown color "green"`) {
		t.Errorf("--inner.color green: %v", err)
	}
	// Integers beyond the field's range are named as such, not wrapped.
	for _, tc := range [][2]string{
		{"--max-steps=9223372036854775808", `"9223372036854775808" is out of range (want an integer from -9223372036854775808 to 9223372036854775807)`},
		{"--seed=18446744073709551616", `"18446744073709551616" is out of range (want an integer from 0 to 18446744073709551615)`},
		{"--max-steps=x", `"x" is not an integer`},
	} {
		if err := fl.Parse([]string{tc[0]}); err == nil || !strings.Contains(err.Error(), tc[1]) {
			t.Errorf("%s: %v, want %q", tc[0], err, tc[1])
		}
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       string // the result, or the error
	}{
		{"empty", "", "{ 10 0 true {0.5 1}}"},
		{"sets and keeps", "max_steps: 3\ninner: {rate: 2}\n", "{ 3 0 true {2 1}}"},
		{"kebab-case", "max-steps: 4\ninner:\n  color: red\n", "{ 4 0 true {0.5 0}}"},
		{"unknown key", "max_step: 3\n", `f.yaml:1:1: unknown key "max_step" (did you mean max_steps?)`},
		{"misplaced nested key", "inner:\n  rate: 1\nrate: 2\n", `f.yaml:3:1: unknown key "rate" (did you mean inner.rate?)`},
		{"nested unknown", "inner:\n  colour: red\n", `f.yaml:2:3: inner: unknown key "colour" (did you mean color?)`},
		{"wrong type", "max_steps: many\n", "f.yaml:1:12: max_steps: cannot unmarshal !!str `many` into int"},
		{"bad enum", "inner: {color: green}\n", `f.yaml:1:16: inner.color: unknown color "green"`},
		{"list for a value", "seed: [1, 2]\n", "f.yaml:1:7: seed: want a single value, not a list"},
		{"value for a mapping", "inner: 3\n", "f.yaml:1:8: inner: want a mapping of keys, not a value"},
		{"negative uint", "seed: -1\n", "f.yaml:1:7: seed: -1 is not a non-negative integer"},
		// Integers beyond the field's range, which go-yaml would wrap or
		// saturate (2^64 into a uint64 was 2^63).
		{"uint beyond 64 bits", "seed: 18446744073709551616\n", "f.yaml:1:7: seed: 18446744073709551616 is out of range (want an integer from 0 to 18446744073709551615)"},
		{"largest uint", "seed: 18446744073709551615\n", "{ 10 18446744073709551615 true {0.5 1}}"},
		{"int beyond 63 bits", "max_steps: 9223372036854775808\n", "f.yaml:1:12: max_steps: 9223372036854775808 is out of range (want an integer from -9223372036854775808 to 9223372036854775807)"},
		{"int below -2^63", "max_steps: -9223372036854775809\n", "f.yaml:1:12: max_steps: -9223372036854775809 is out of range"},
		{"int far beyond", "max_steps: 1000000000000000000000000000000\n", "max_steps: 1000000000000000000000000000000 is out of range"},
		{"float beyond an int", "max_steps: 1e30\n", "f.yaml:1:12: max_steps: 1e30 is out of range"},
		{"uint beyond 64 bits in a list", "seeds: [1, 18446744073709551616]\n", "f.yaml:1:12: seeds[1]: 18446744073709551616 is out of range"},
		{"fraction for an int", "max_steps: 1.5\n", "f.yaml:1:12: max_steps: 1.5 is not an integer"},
		{"fraction for a uint", "seed: 2.5\n", "f.yaml:1:7: seed: 2.5 is not an integer"},
		{"negative fraction for a uint", "seed: -1.5\n", "f.yaml:1:7: seed: -1.5 is not an integer"},
		{"negative float for a uint", "seed: -2.0\n", "f.yaml:1:7: seed: -2.0 is not a non-negative integer"},
		{"infinity for an int", "max_steps: .inf\n", "f.yaml:1:12: max_steps: .inf is not an integer"},
		{"whole float for an int", "max_steps: 2.0\ninner: {rate: 3}\n", "{ 2 0 true {3 1}}"},
		{"fraction in a list of ints", "seeds: [1, 1.5]\n", "f.yaml:1:12: seeds[1]: 1.5 is not an integer"},
		{"syntax", "a: [\n", "f.yaml:1: did not find expected node content"},
		{"two documents", "seed: 1\n---\nseed: 2\n", "f.yaml:2: a second YAML document (want one)"},
		{"duplicate key", "seed: 1\nseed: 2\n", `f.yaml:2:1: key "seed" given twice (first on line 1)`},
		{"both spellings", "max_steps: 1\nmax-steps: 2\n", `f.yaml:2:1: key "max-steps" given twice (first on line 1)`},
		{"not configuration", "skip: 1\n", `f.yaml:1:1: unknown key "skip"`},
		{"files-only fields", "tags: [a, b]\nnode: {x: 1}\n", "{ 10 0 true {0.5 1}}"},
		{"merge key", "inner: &a {rate: 1}\n<<: *a\n", "merge keys"},
	} {
		var c config
		SetDefaults(&c)
		err := Decode("f.yaml", []byte(tc.yaml), &c)
		got := fmt.Sprintf("{%s %d %d %v {%v %d}}", c.Name, c.MaxSteps, c.Seed, c.On, c.Inner.Rate, c.Inner.Color)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestDecodeAliasBomb: a few nodes of aliases that stand for ten billion
// values are refused, not expanded.
func TestDecodeAliasBomb(t *testing.T) {
	level := &yaml.Node{Kind: yaml.SequenceNode}
	for range 10 {
		level.Content = append(level.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "x"})
	}
	for range 9 {
		next := &yaml.Node{Kind: yaml.SequenceNode}
		for range 10 {
			next.Content = append(next.Content, &yaml.Node{Kind: yaml.AliasNode, Alias: level})
		}
		level = next
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: "d"}, level}}
	var v struct {
		D [][][][][][][][][][]string `yaml:"d"`
	}
	err := DecodeNode("bomb.yaml", root, &v)
	if err == nil || !strings.Contains(err.Error(), "YAML nodes") {
		t.Errorf("error %v, want the node budget's", err)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"schedule.lr", "schedule.min-lr", "max-steps", "goldfish.k", "goldfish.h", "batch-size", "seed"}
	for in, want := range map[string]string{
		"lr":          "schedule.lr",
		"k":           "goldfish.k",
		"max_steps":   "max-steps",
		"max-stepz":   "max-steps",
		"batchsize":   "batch-size",
		"goldfish-k":  "goldfish.k",
		"min_lr":      "schedule.min-lr",
		"zzz":         "",
		"x":           "",
		"temperature": "",
	} {
		if got := Suggest(in, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzDecode: any input decodes or fails with an error, never a panic or
// a hang, and an error names the file.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "max_steps: 3\n", "inner: {rate: 2, color: red}\n", "a: &x [*x]\n", "tags: [a, b]\nnode: {x: 1}\n", "seed: -1\n", "inner: *y\n", "<<: {a: 1}\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var c config
		if err := Decode("fuzz.yaml", []byte(s), &c); err != nil && !strings.HasPrefix(err.Error(), "fuzz.yaml") {
			t.Errorf("error %q does not name the file", err)
		}
	})
}

func TestCheckNumbers(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(c *config)
		want string // "" for none
	}{
		{"defaults", func(c *config) {}, ""},
		{"zero and negative zero", func(c *config) { c.MaxSteps, c.Inner.Rate = 0, math.Copysign(0, -1) }, ""},
		{"NaN", func(c *config) { c.Inner.Rate = math.NaN() }, "inner.rate: NaN (want a finite number)"},
		{"infinity", func(c *config) { c.Inner.Rate = math.Inf(1) }, "inner.rate: +Inf (want a finite number)"},
		{"minus infinity", func(c *config) { c.Inner.Rate = math.Inf(-1) }, "inner.rate: -Inf (want a finite number)"},
		{"negative count", func(c *config) { c.MaxSteps = -3 }, "max_steps: -3 (want 0 or more)"},
		{"largest count", func(c *config) { c.MaxSteps = MaxInt }, ""},
		{"huge count", func(c *config) { c.MaxSteps = math.MaxInt64 }, "max_steps: 9223372036854775807 (want 0 to 1000000000)"},
		{"negative rate", func(c *config) { c.Inner.Rate = -1 }, ""}, // its owner's rule
	} {
		var c config
		SetDefaults(&c)
		tc.set(&c)
		err := CheckNumbers(&c)
		if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestReference(t *testing.T) {
	want := `name: ""       # a name
max_steps: 10
seed: 0
on: true
inner:
  rate: 0.5    # a rate
  color: blue
`
	if got := Reference(&config{}); got != want {
		t.Errorf("Reference:\n%s\nwant:\n%s", got, want)
	}
}

// level is an enumeration whose flag alone means "high", as a switch
// that became a mode would.
type level int

func (l level) MarshalText() ([]byte, error) { return []byte([]string{"off", "low", "high"}[l]), nil }
func (l *level) UnmarshalText(b []byte) error {
	for i, s := range []string{"off", "low", "high"} {
		if string(b) == s {
			*l = level(i)
			return nil
		}
	}
	return fmt.Errorf("unknown level %q", b)
}
func (level) NoOptValue() string { return "high" }

// TestNoOptValue: a NoOptValuer's flag given alone takes NoOptValue, and
// a value with = as any other leaf's; CommandLine writes it back so.
func TestNoOptValue(t *testing.T) {
	type c struct {
		Level level `yaml:"level"`
		Seed  int   `yaml:"seed"`
	}
	for _, tc := range []struct {
		args []string
		want level
		line string
	}{
		{[]string{"--level", "--seed", "2"}, 2, "run --level --seed 2"},
		{[]string{"--level=low"}, 1, "run --level=low"},
		{nil, 0, "run"},
	} {
		var v c
		fl := pflag.NewFlagSet("test", pflag.ContinueOnError)
		Bind(fl, &v)
		if err := fl.Parse(tc.args); err != nil || v.Level != tc.want {
			t.Errorf("%q: level %v, %v; want %v", tc.args, v.Level, err, tc.want)
		}
		if got := CommandLine("run", fl, "", ""); got != tc.line {
			t.Errorf("%q: command line %q, want %q", tc.args, got, tc.line)
		}
	}
}
