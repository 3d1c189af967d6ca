// Package choice is the error of a name that is not one of a known set — a
// preset, a GPU, a protocol — said the same way everywhere: what was
// given, what would have been accepted, and the nearest accepted name when
// one is close. Its message carries no package prefix: it is about the
// user's input, which each command names in its own words
// ("init: --preset: unknown preset "tinny" (want one of …; did you mean "tiny"?)").
package choice

import (
	"fmt"
	"sort"
	"strings"
)

// UnknownError is a name that is not one of Known.
type UnknownError struct {
	What  string   // what the name names: "preset", "gpu"
	Name  string   // as given
	Known []string // the accepted names
}

func (e *UnknownError) Error() string {
	known := append([]string(nil), e.Known...)
	sort.Strings(known)
	msg := fmt.Sprintf("unknown %s %q (want one of %s", e.What, e.Name, strings.Join(known, ", "))
	if near := Nearest(e.Name, known); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return msg + ")"
}

// Nearest is the name of known within two edits of name (the first of the
// closest), or "" when none is: a typo's likely intent.
func Nearest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := Distance(strings.ToLower(name), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b, in bytes: the
// measure of every "did you mean" (Nearest, and options.Suggest's flags
// and keys).
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
