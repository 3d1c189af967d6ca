package main

import (
	"os"
	"path/filepath"
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

// readmeOptional matches an optional flag in a README synopsis: [--name],
// [--name=false], [--name VALUE …].
var readmeOptional = regexp.MustCompile(`\[--([a-z0-9.-]+)(=false)?[\] ]`)

// TestREADMESynopses reads the README's command synopses (the plain code
// blocks whose lines start with "memtrain CMD") and fails on a flag the
// command does not have, and on a boolean shown the wrong way round: a
// flag that defaults to true shown as [--flag], which reads as opt-in, or
// one that defaults to false shown as [--flag=false].
func TestREADMESynopses(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(findModuleRoot(t, wd), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	var cmd *cobra.Command
	inBlock, inPlain, checked := false, false, 0
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			inPlain = inBlock && strings.TrimSpace(line) == "```"
			cmd = nil
			continue
		}
		if !inPlain {
			continue
		}
		if f := strings.Fields(line); len(f) > 1 && f[0] == "memtrain" {
			var path []string
			for _, w := range f[1:] {
				if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "[") || strings.ToUpper(w) == w {
					break
				}
				path = append(path, w)
			}
			c, _, err := root.Find(path)
			if err != nil || c == root {
				t.Errorf("README.md:%d: %q names no command", i+1, line)
				cmd = nil
				continue
			}
			cmd = c
		} else if !strings.HasPrefix(line, " ") {
			cmd = nil
		}
		if cmd == nil {
			continue
		}
		for _, m := range readmeOptional.FindAllStringSubmatch(line+" ", -1) {
			fl := cmd.Flags().Lookup(m[1])
			if fl == nil {
				fl = cmd.InheritedFlags().Lookup(m[1])
			}
			checked++
			switch {
			case fl == nil:
				t.Errorf("README.md:%d: memtrain %s has no flag --%s", i+1, cmd.Name(), m[1])
			case fl.Value.Type() != "bool":
			case fl.DefValue == "true" && m[2] == "":
				t.Errorf("README.md:%d: --%s defaults to true, shown as [--%s]; write [--%s=false]", i+1, m[1], m[1], m[1])
			case fl.DefValue == "false" && m[2] != "":
				t.Errorf("README.md:%d: --%s defaults to false, shown as [--%s=false]", i+1, m[1], m[1])
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked only %d optional flags in the README's synopses", checked)
	}
}

// TestLineErrorsNamedOnce: an input line's error names the command, the
// file and the line exactly once, in both line-reading commands.
func TestLineErrorsNamedOnce(t *testing.T) {
	in := writeFile(t, "lines.jsonl", "{\"text\": \"fine\"}\n{oops\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tokenize", "--tokenizer", "builtin:llama2", "--input", in},
			"memtrain: tokenize: " + in + ":2: invalid JSON: "},
		{[]string{"goldfish", "--tokenizer", "builtin:llama2", "--input", in, "--k", "4"},
			"memtrain: goldfish: " + in + ":2: "},
	} {
		_, errs, code := memtrain(t, "", c.args...)
		if code != 1 || !strings.HasPrefix(errs, c.want) || strings.Count(errs, in) != 1 || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q, want one line starting %q", c.args, code, errs, c.want)
		}
	}
}
