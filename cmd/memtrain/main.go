// Command memtrain fine-tunes Llama checkpoints in HuggingFace layout and
// measures their memorization. Run `memtrain help` for the commands.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line and returns the process exit code. Errors
// are printed as one line on stderr.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(stderr, "memtrain: "+oneLine(ee.msg))
			}
			return ee.code
		}
		fmt.Fprintln(stderr, "memtrain: "+oneLine(err.Error()))
		return 1
	}
	return 0
}

// oneLine folds a multi-line message so that failures are always one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// An exitError ends the command with a status other than 1: after a stop
// by a signal, the signal's status. Its message, if any, is printed as
// every error is.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
