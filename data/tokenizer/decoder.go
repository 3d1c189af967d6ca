package tokenizer

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A decoder turns token strings back into text, as HF's Decoder::decode_chain:
// each maps the list of tokens to a new list, and the final list is joined.
// Only Replace can lengthen the tokens, by at most its bound (see growth),
// and none over limit bytes in all; Replace alone can fail.
type decoder interface {
	decodeChain(tokens []string, limit int) ([]string, error)
}

// decoderSeq applies decoders in order (HF "Sequence").
type decoderSeq []decoder

func (q decoderSeq) decodeChain(tokens []string, limit int) ([]string, error) {
	for _, d := range q {
		var err error
		if tokens, err = d.decodeChain(tokens, limit); err != nil {
			return nil, err
		}
	}
	return tokens, nil
}

// byteLevelDecoder maps byte-level characters back to bytes and the whole
// to text, with each ill-formed UTF-8 sequence as U+FFFD (HF "ByteLevel").
type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string, _ int) ([]string, error) {
	var b []byte
	for _, t := range tokens {
		b = appendByteLevelDecoded(b, t)
	}
	return []string{lossyString(b)}, nil
}

func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string(appendLossy(nil, b))
}

// replaceDecoder replaces a pattern in each token (HF "Replace").
type replaceDecoder struct {
	pattern pattern
	content string
	where   string // "tokenizer: FILE: FIELD", for errors
}

func (r replaceDecoder) decodeChain(tokens []string, limit int) ([]string, error) {
	in := 0
	for _, t := range tokens {
		in += len(t)
	}
	lim := min(limit, bound(in, growth))
	left := lim // for all the tokens
	for i, t := range tokens {
		out, err := r.pattern.replaceAll(t, r.content, left)
		if err != nil {
			if tl := (*tooLongError)(nil); errors.As(err, &tl) {
				return nil, tooLong(r.where, int64(lim-left)+tl.size, in, lim)
			}
			return nil, err
		}
		tokens[i] = out
		left -= len(out)
	}
	return tokens, nil
}

// byteFallbackDecoder turns runs of <0xXX> tokens into the text of their
// bytes, or into one U+FFFD per byte if they are not valid UTF-8 (HF
// "ByteFallback").
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decodeChain(tokens []string, _ int) ([]string, error) {
	out := tokens[:0:0]
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if b, ok := fallbackByte(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out, nil
}

// fallbackByte parses a byte-fallback token "<0xXX>" as HF does (which, with
// Rust's from_str_radix, also accepts "<0x+X>").
func fallbackByte(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	h := t[3:5]
	if h[0] == '+' {
		h = h[1:]
	}
	v, err := strconv.ParseUint(h, 16, 8)
	if err != nil || strings.ContainsAny(h, "+-_") {
		return 0, false
	}
	return byte(v), true
}

// fuseDecoder joins all tokens into one (HF "Fuse").
type fuseDecoder struct{}

func (fuseDecoder) decodeChain(tokens []string, _ int) ([]string, error) {
	return []string{strings.Join(tokens, "")}, nil
}

// stripDecoder removes up to start leading and stop trailing copies of a
// character from each token (HF "Strip").
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decodeChain(tokens []string, _ int) ([]string, error) {
	for i, t := range tokens {
		for k := 0; k < d.start; k++ {
			r, n := utf8.DecodeRuneInString(t)
			if n == 0 || r != d.content {
				break
			}
			t = t[n:]
		}
		for k := 0; k < d.stop; k++ {
			r, n := utf8.DecodeLastRuneInString(t)
			if n == 0 || r != d.content {
				break
			}
			t = t[:len(t)-n]
		}
		tokens[i] = t
	}
	return tokens, nil
}

// metaspaceDecoder turns the replacement character back into spaces, and
// drops it from the first token unless the prepend scheme is "never" (HF
// "Metaspace").
type metaspaceDecoder struct {
	replacement rune
	prepend     prependScheme
}

func (d metaspaceDecoder) decodeChain(tokens []string, _ int) ([]string, error) {
	for i, t := range tokens {
		var b strings.Builder
		for _, r := range t {
			if r == d.replacement {
				if i == 0 && d.prepend != prependNever {
					continue
				}
				r = ' '
			}
			b.WriteRune(r)
		}
		tokens[i] = b.String()
	}
	return tokens, nil
}
