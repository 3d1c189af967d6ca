package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpPaths visits every command and subcommand of the tree under c (its
// path without "memtrain"), c first, leaving out cobra's help and completion.
func helpPaths(c *cobra.Command, prefix []string, visit func(path []string, c *cobra.Command)) {
	visit(prefix, c)
	for _, sub := range c.Commands() {
		if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
			continue
		}
		helpPaths(sub, append(append([]string(nil), prefix...), sub.Name()), visit)
	}
}

// badHelp matches help wording that reads wrong: "only never" (as in
// "(0: only never)") or a zero meaning left empty ("(0: )").
var badHelp = regexp.MustCompile(`\bonly never\b|\(0: *\)`)

// TestHelpFlagPlaceholders renders `memtrain PATH --help` for every command
// and fails on a flag whose value placeholder pflag took from backticks in its
// usage (`--data memtrain data prepare`: a word quoted for the reader becomes
// the flag's value name) and on garbled help such as "(0: only never)".
func TestHelpFlagPlaceholders(t *testing.T) {
	n := 0
	helpPaths(newRootCmd(), nil, func(path []string, c *cobra.Command) {
		n++
		name := strings.Join(append([]string{"memtrain"}, path...), " ")
		out, errs, code := memtrain(t, "", append(append([]string(nil), path...), "--help")...)
		if code != 0 {
			t.Errorf("%s --help: exit %d: %s", name, code, errs)
			return
		}
		check := func(fl *pflag.Flag) {
			if !strings.Contains(fl.Usage, "`") {
				return
			}
			placeholder, _ := pflag.UnquoteUsage(fl)
			t.Errorf("%s --help: flag --%s shows %q as its value placeholder (backticks in its usage %q); quote with \" or ' instead",
				name, fl.Name, placeholder, fl.Usage)
		}
		c.LocalFlags().VisitAll(check)
		c.InheritedFlags().VisitAll(check)
		for i, line := range strings.Split(out, "\n") {
			if m := badHelp.FindString(line); m != "" {
				t.Errorf("%s --help, line %d: %q reads wrong: %s", name, i+1, m, line)
			}
		}
	})
	if n < 10 {
		t.Fatalf("walked only %d commands", n)
	}
}
