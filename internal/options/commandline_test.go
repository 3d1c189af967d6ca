package options

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestShellQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "''"},
		{"run-1/final", "run-1/final"},
		{"dp=2,x=2", "dp=2,x=2"},
		{"my run", "'my run'"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
		{"a*b", "'a*b'"},
	} {
		if got := ShellQuote(c.in); got != c.want {
			t.Errorf("ShellQuote(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestCommandLine: the line repeats the flags set (booleans without a value
// word), then the arguments, then the last flag with the value given.
func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--quick"}, "memtrain demo --quick --out 'new out'"},
		{[]string{"--quick=false", "--out", "old"}, "memtrain demo --quick=false --out 'new out'"},
		{[]string{"spec.yaml", "--threads", "2"}, "memtrain demo --threads 2 spec.yaml --out 'new out'"},
		{nil, "memtrain demo --out 'new out'"},
	} {
		fl := pflag.NewFlagSet("demo", pflag.ContinueOnError)
		fl.Bool("quick", false, "")
		fl.Int("threads", 0, "")
		fl.String("out", "", "")
		if err := fl.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := CommandLine("memtrain demo", fl, "out", "new out"); got != c.want {
			t.Errorf("%q: %q, want %q", c.args, got, c.want)
		}
	}
}

// TestIntRange: a value out of range, or not an integer, is refused as the
// flag is parsed, with the range stated; 0 is taken only where it means
// something.
func TestIntRange(t *testing.T) {
	for _, c := range []struct {
		args    []string
		batch   int
		seqLen  int
		wantErr string
	}{
		{nil, 8, 0, ""},
		{[]string{"--batch", "1", "--seq-len", "0"}, 1, 0, ""},
		{[]string{"--batch=100", "--seq-len", "4096"}, 100, 4096, ""},
		{[]string{"--batch", "0"}, 0, 0, `invalid argument "0" for "--batch" flag: want 1 to 100`},
		{[]string{"--batch", "101"}, 0, 0, `invalid argument "101" for "--batch" flag: want 1 to 100`},
		{[]string{"--seq-len", "-1"}, 0, 0, `invalid argument "-1" for "--seq-len" flag: want 1 to 8192 (0: the default)`},
		{[]string{"--batch", "4611686018427387905"}, 0, 0, `want 1 to 100`},
		{[]string{"--batch", "two"}, 0, 0, `invalid argument "two" for "--batch" flag: want an integer from 1 to 100`},
		{[]string{"--zero", "2"}, 0, 0, `invalid argument "2" for "--zero" flag: want 0 or 1`},
	} {
		fl := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var batch, seqLen int
		IntRange(fl, &batch, "batch", 8, 1, 100, "", "")
		IntRange(fl, &seqLen, "seq-len", 0, 1, 8192, "the default", "")
		var stage int
		IntRange(fl, &stage, "zero", 0, 0, 1, "", "")
		err := fl.Parse(c.args)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.wantErr == "" && (batch != c.batch || seqLen != c.seqLen):
			t.Errorf("%q: batch %d, seq-len %d; want %d, %d", c.args, batch, seqLen, c.batch, c.seqLen)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%q: error %v, want %q", c.args, err, c.wantErr)
		}
	}
}
