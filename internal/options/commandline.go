package options

import (
	"strings"

	"github.com/spf13/pflag"
)

// CommandLine is the command line that repeats a parsed command: path (the
// command's words, such as "memtrain experiment run"), the flags that were
// set, the arguments, and last the flag named last with the value given
// (a resume hint's output folder, say).
//
// A boolean flag is written --name (or --name=false): "--quick true" would
// give "true" as an argument. Every word is quoted for a POSIX shell where
// it needs to be, so that the line runs as printed.
func CommandLine(path string, fl *pflag.FlagSet, last, value string) string {
	args := strings.Fields(path)
	fl.Visit(func(f *pflag.Flag) {
		switch {
		case f.Name == last:
		case f.NoOptDefVal != "" && f.Value.String() == f.NoOptDefVal:
			args = append(args, "--"+f.Name)
		case f.NoOptDefVal != "":
			args = append(args, "--"+f.Name+"="+ShellQuote(f.Value.String()))
		default:
			args = append(args, "--"+f.Name, ShellQuote(f.Value.String()))
		}
	})
	for _, a := range fl.Args() {
		args = append(args, ShellQuote(a))
	}
	if last != "" {
		args = append(args, "--"+last, ShellQuote(value))
	}
	return strings.Join(args, " ")
}

// ShellQuote is s as one word of a POSIX shell: as it is when it holds
// nothing the shell would read, else in single quotes.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
