package goldfish

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends the JSON object of one sequence's drops, as
// `memtrain goldfish` writes a line: {"ids":[...],"drop":[0,1,...],
// "dropped":n,"fraction":f}, fraction being dropped over targets (0 for
// none).
func AppendJSON(b []byte, ids []int32, drop []bool, dropped, targets int) []byte {
	b = append(b, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	b = append(b, `],"drop":[`...)
	for i, d := range drop {
		if i > 0 {
			b = append(b, ',')
		}
		if d {
			b = append(b, '1')
		} else {
			b = append(b, '0')
		}
	}
	b = append(b, `],"dropped":`...)
	b = strconv.AppendInt(b, int64(dropped), 10)
	b = append(b, `,"fraction":`...)
	frac := 0.0
	if targets > 0 {
		frac = float64(dropped) / float64(targets)
	}
	b = strconv.AppendFloat(b, frac, 'g', -1, 64)
	return append(b, '}')
}

// A Highlight appends a dropped token's text, marked.
type Highlight func(b []byte, s string) []byte

// Brackets marks a dropped token [[so]], for files and pipes.
func Brackets(b []byte, s string) []byte {
	b = append(b, "[["...)
	b = append(b, s...)
	return append(b, "]]"...)
}

// ReverseVideo marks a dropped token in reverse video, for terminals.
func ReverseVideo(b []byte, s string) []byte {
	b = append(b, "\x1b[7m"...)
	b = append(b, s...)
	return append(b, "\x1b[27m"...)
}

// showContext is how many tokens before a piece are decoded with it, so
// that a piece decodes as it reads in the text: with the space that a
// SentencePiece decoder strips at the start, and with the characters whose
// bytes straddle tokens whole.
const showContext = 8

// A Decoder turns token ids into text (a *tokenizer.Tokenizer).
type Decoder interface {
	Decode(ids []int32) string
}

// AppendShown appends the text of ids with each dropped token highlighted
// on its own and the kept tokens between them in runs. Without a decoder
// (tok nil) it shows the ids, space-separated.
func AppendShown(b []byte, tok Decoder, ids []int32, drop []bool, hl Highlight) []byte {
	if tok == nil {
		for i, id := range ids {
			if i > 0 {
				b = append(b, ' ')
			}
			if drop[i] {
				b = hl(b, strconv.Itoa(int(id)))
			} else {
				b = strconv.AppendInt(b, int64(id), 10)
			}
		}
		return b
	}
	for a := 0; a < len(ids); {
		e := a + 1
		if !drop[a] {
			for e < len(ids) && !drop[e] {
				e++
			}
		}
		c := max(0, a-showContext)
		// The text that ids[a:e] add after ids[c:a]. A character left
		// incomplete at the end of a piece (decoded as U+FFFD) belongs to
		// the piece that completes it.
		before := trimIncomplete(tok.Decode(ids[c:a]))
		upto := tok.Decode(ids[c:e])
		if e < len(ids) {
			upto = trimIncomplete(upto)
		}
		piece := upto[commonPrefix(before, upto):]
		if drop[a] {
			b = hl(b, piece)
		} else {
			b = append(b, piece...)
		}
		a = e
	}
	return b
}

// trimIncomplete removes trailing U+FFFD, the decoding of bytes that may
// begin a character that the next token completes.
func trimIncomplete(s string) string {
	for {
		r, n := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || n == 0 {
			return s
		}
		s = s[:len(s)-n]
	}
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			// Back up to a character boundary of b.
			for i > 0 && !utf8.RuneStart(b[i]) {
				i--
			}
			return i
		}
	}
	return n
}
