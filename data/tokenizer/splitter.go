package tokenizer

import "unicode/utf8"

// llama3Pattern is the pre-tokenizer regular expression of Llama 3 (and of
// tiktoken's cl100k_base). It needs look-ahead, which Go's regexp lacks, so
// llama3Next implements it by hand.
const llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Character classes of the Llama 3 pattern, as Python's regex has them.
const (
	classL  = 1 << iota // \p{L}: letter
	classN              // \p{N}: number
	classS              // \s: Unicode White_Space
	classNL             // \r or \n (also classS)
)

var asciiClass = makeASCIIClass()

func makeASCIIClass() [utf8.RuneSelf]uint8 {
	var t [utf8.RuneSelf]uint8
	for r := range rune(utf8.RuneSelf) {
		t[r] = classOf(r)
	}
	return t
}

// classOf returns the class of r under the package's tables (Python's
// regex's, see unicode.go), not Go's, which are of an older Unicode.
func classOf(r rune) uint8 {
	p := props(r)
	var c uint8
	switch categoryNames[p&propCategory][0] {
	case 'L':
		c = classL
	case 'N':
		c = classN
	}
	if p&propSpace != 0 { // White_Space, as \s in Python's regex, Oniguruma and Rust's regex
		c |= classS
		if r == '\r' || r == '\n' {
			c |= classNL
		}
	}
	return c
}

// decodeClass decodes the character at s[i:] and returns its class and width.
// An invalid UTF-8 byte is a character of width 1 classed as U+FFFD (a symbol),
// so that it joins punctuation runs while its byte is kept as it is.
func decodeClass(s string, i int) (r rune, class uint8, width int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), asciiClass[c], 1
	}
	r, width = utf8.DecodeRuneInString(s[i:])
	return r, classOf(r), width
}

// llama3Next returns the end of the match of the Llama 3 pattern that starts
// at s[i:], i < len(s), with the leftmost-first alternation and backtracking
// semantics of the regular-expression engines that HF tokenizers uses
// (Oniguruma, or fancy-regex), so that successive calls give the matches of
// FindAll. Some alternative always matches at least one character, so the
// matches cover s.
func llama3Next(s string, i int) int {
	r0, c0, n0 := decodeClass(s, i)
	j := i + n0

	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' && j < len(s) {
		r1, _, n1 := decodeClass(s, j)
		switch foldContraction(r1) {
		case 's', 't', 'm', 'd':
			return j + n1
		case 'r', 'v':
			if k := j + n1; k < len(s) {
				if r2, _, n2 := decodeClass(s, k); foldContraction(r2) == 'e' {
					return k + n2
				}
			}
		case 'l':
			if k := j + n1; k < len(s) {
				if r2, _, n2 := decodeClass(s, k); foldContraction(r2) == 'l' {
					return k + n2
				}
			}
		}
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0&classL != 0 {
		return skipClass(s, j, classL)
	}
	if c0&(classN|classNL) == 0 && j < len(s) {
		if _, c1, n1 := decodeClass(s, j); c1&classL != 0 {
			return skipClass(s, j+n1, classL)
		}
	}

	// \p{N}{1,3}
	if c0&classN != 0 {
		for range 2 {
			if j == len(s) {
				break
			}
			_, c, n := decodeClass(s, j)
			if c&classN == 0 {
				break
			}
			j += n
		}
		return j
	}

	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'; the optional space is U+0020 only.
	k := i
	if r0 == ' ' && j < len(s) {
		k = j
	}
	if _, c, n := decodeClass(s, k); c == 0 {
		k = skipOther(s, k+n)
		for k < len(s) && (s[k] == '\r' || s[k] == '\n') {
			k++
		}
		return k
	}

	// From here r0 is white space. Find the run of it, and its last \r or \n.
	end, lastNL, last := i, -1, i
	for end < len(s) {
		_, c, n := decodeClass(s, end)
		if c&classS == 0 {
			break
		}
		if c&classNL != 0 {
			lastNL = end
		}
		last = end
		end += n
	}
	// \s*[\r\n]+: backtracking \s* stops just before the last \r or \n.
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S): the whole run at the end of the text, else all but its last
	// character, if that leaves one.
	if end == len(s) || last == i {
		// \s+ (or the whole run at the end).
		return end
	}
	return last
}

// foldContraction maps the letters of the contractions to lower case under
// Unicode simple case folding, which maps U+017F LATIN SMALL LETTER LONG S
// to 's'. Other characters map to 0.
func foldContraction(r rune) rune {
	switch r {
	case 's', 't', 'm', 'd', 'r', 'v', 'l', 'e':
		return r
	case 'S', 'T', 'M', 'D', 'R', 'V', 'L', 'E':
		return r + 'a' - 'A'
	case 'ſ':
		return 's'
	}
	return 0
}

// skipClass returns the end of the run of characters of class c from s[i:].
func skipClass(s string, i int, c uint8) int {
	for i < len(s) {
		_, ci, n := decodeClass(s, i)
		if ci&c == 0 {
			break
		}
		i += n
	}
	return i
}

// skipOther returns the end of the run of characters that are neither
// letters, numbers nor white space from s[i:].
func skipOther(s string, i int) int {
	for i < len(s) {
		_, c, n := decodeClass(s, i)
		if c != 0 {
			break
		}
		i += n
	}
	return i
}
