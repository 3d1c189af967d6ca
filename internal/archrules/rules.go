// Package archrules checks the module's import rules: the one-way arrows
// between packages that ARCHITECTURE.md promises, written there in a
// machine-readable block so that the document and the check cannot drift
// apart. Its test runs the check as part of go test ./...
//
// The block is a fenced code block with the info string "rules", one rule a
// line:
//
//	engine/... !-> data/...
//
// meaning that no non-test Go file of a package matching the left pattern
// may import a package matching the right one. Patterns are package paths
// relative to the module root, with ... as in go's package patterns: it
// matches any string, and a trailing /... also matches the package itself.
// Blank lines and lines starting with # are ignored.
package archrules

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Arrow separates a rule's two patterns.
const Arrow = "!->"

// Rule forbids the packages matching From to import those matching To.
type Rule struct {
	From, To string
	File     string // the document the rule was read from, for messages
	Line     int    // 1-based line in File

	from, to *regexp.Regexp
}

// String returns the rule as it is written in the rules block.
func (r Rule) String() string { return r.From + " " + Arrow + " " + r.To }

// Forbids reports whether the rule forbids package pkg to import package
// imp, both relative to the module root ("." for the root itself).
func (r Rule) Forbids(pkg, imp string) bool {
	return r.from.MatchString(pkg) && r.to.MatchString(imp)
}

// Parse reads the rules from the single ```rules block of a Markdown
// document; name is the document's name for messages and Rule.File. A
// missing, unterminated, repeated or empty block is an error, as is any line
// that is not a rule, so that a broken document cannot make the check pass
// by checking nothing.
func Parse(name string, doc []byte) ([]Rule, error) {
	var (
		rules   []Rule
		in      bool // inside the rules block
		start   int  // the line of its opening fence
		fence   string
		lineNum int
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		lineNum++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !in {
			f, info, ok := openingFence(trimmed)
			if !ok || info != "rules" {
				continue
			}
			if start != 0 {
				return nil, fmt.Errorf("%s line %d: a second rules block (the first is at line %d)", name, lineNum, start)
			}
			in, start, fence = true, lineNum, f
			continue
		}
		if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
			in = false
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		r, err := parseRule(trimmed)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", name, lineNum, err)
		}
		r.File, r.Line = name, lineNum
		rules = append(rules, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	switch {
	case start == 0:
		return nil, fmt.Errorf("%s: no ```rules block", name)
	case in:
		return nil, fmt.Errorf("%s line %d: the rules block is not closed", name, start)
	case len(rules) == 0:
		return nil, fmt.Errorf("%s line %d: the rules block has no rules", name, start)
	}
	return rules, nil
}

// openingFence reports whether line opens a fenced code block, returning the
// fence (``` or longer, or ~~~) and the info string's first word.
func openingFence(line string) (fence, info string, ok bool) {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			fields := strings.Fields(line[n:])
			if len(fields) > 0 {
				info = fields[0]
			}
			return line[:n], info, true
		}
	}
	return "", "", false
}

// parseRule parses one "FROM !-> TO" line.
func parseRule(line string) (Rule, error) {
	from, to, ok := strings.Cut(line, Arrow)
	if !ok || strings.Contains(to, Arrow) {
		return Rule{}, fmt.Errorf("rule %q: want %q", line, "FROM "+Arrow+" TO")
	}
	r := Rule{From: strings.TrimSpace(from), To: strings.TrimSpace(to)}
	var err error
	if r.from, err = compile(r.From); err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", line, err)
	}
	if r.to, err = compile(r.To); err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", line, err)
	}
	return r, nil
}

// compile checks a pattern and turns it into a regular expression, the way
// cmd/go matches package patterns.
func compile(pattern string) (*regexp.Regexp, error) {
	switch {
	case pattern == "":
		return nil, errors.New("empty pattern")
	case strings.ContainsAny(pattern, " \t\\"):
		return nil, fmt.Errorf("pattern %q: spaces or backslashes", pattern)
	case path.IsAbs(pattern) || path.Clean(pattern) != pattern || pattern == ".." || strings.HasPrefix(pattern, "../"):
		// Unclean patterns (a./b, a/, ./a) would never equal a package's
		// clean path, so the rule would silently check nothing.
		return nil, fmt.Errorf("pattern %q: not a clean path relative to the module root", pattern)
	}
	re := regexp.QuoteMeta(pattern)
	re = strings.ReplaceAll(re, `\.\.\.`, `.*`)
	// As in go's patterns, a/... matches a itself too.
	if strings.HasSuffix(re, `/.*`) {
		re = strings.TrimSuffix(re, `/.*`) + `(/.*)?`
	}
	return regexp.Compile(`^` + re + `$`)
}

// Match reports whether the package pkg, relative to the module root,
// matches pattern. An invalid pattern matches nothing.
func Match(pattern, pkg string) bool {
	re, err := compile(pattern)
	return err == nil && re.MatchString(pkg)
}
