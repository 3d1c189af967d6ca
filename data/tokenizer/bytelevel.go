package tokenizer

import "unicode/utf8"

// The byte-level alphabet of GPT-2 and Llama 3: every byte is written as one
// printable character, so that any byte string is a string of "characters".
// Printable Latin-1 bytes stand for themselves; the other 68 bytes are mapped,
// in order, to U+0100 and up (the space 0x20 becomes U+0120 'Ġ').
var (
	byteLevelRune  = makeByteLevelRunes()     // byte → character
	byteLevelUTF8  = makeByteLevelUTF8()      // byte → UTF-8 of its character
	byteLevelByte  = makeByteLevelBytes()     // character → byte, -1 if none
	maxByteLevelCh = rune(len(byteLevelByte)) // characters are below this
)

func makeByteLevelRunes() [256]rune {
	var t [256]rune
	n := rune(0)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
	}
	return t
}

// byteLevelChar is the UTF-8 encoding of one byte-level character: one or two bytes.
type byteLevelChar struct {
	b [2]byte
	n uint8
}

func makeByteLevelUTF8() [256]byteLevelChar {
	var t [256]byteLevelChar
	for b, r := range makeByteLevelRunes() {
		n := utf8.EncodeRune(t[b].b[:], r)
		t[b].n = uint8(n)
	}
	return t
}

func makeByteLevelBytes() []int16 {
	runes := makeByteLevelRunes()
	last := rune(0)
	for _, r := range runes {
		last = max(last, r)
	}
	t := make([]int16, last+1)
	for i := range t {
		t[i] = -1
	}
	for b, r := range runes {
		t[r] = int16(b)
	}
	return t
}

// appendByteLevel appends the byte-level characters of s to dst.
func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := &byteLevelUTF8[s[i]]
		if c.n == 1 {
			dst = append(dst, c.b[0])
		} else {
			dst = append(dst, c.b[0], c.b[1])
		}
	}
	return dst
}

// appendByteLevelDecoded appends the bytes that the byte-level characters of
// token stand for. A token holding any other character is appended as it is,
// as HF's ByteLevel decoder does.
func appendByteLevelDecoded(dst []byte, token string) []byte {
	n := len(dst)
	for _, r := range token {
		if r >= maxByteLevelCh || byteLevelByte[r] < 0 {
			return append(dst[:n], token...)
		}
		dst = append(dst, byte(byteLevelByte[r]))
	}
	return dst
}

// appendLossy appends b to dst, replacing each maximal ill-formed subsequence
// of UTF-8 with one U+FFFD, exactly as Rust's String::from_utf8_lossy does
// (the Unicode "substitution of maximal subparts" practice). Go's own
// conversions differ: they replace every bad byte.
func appendLossy(dst []byte, b []byte) []byte {
	for len(b) > 0 {
		c := b[0]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			b = b[1:]
			continue
		}
		r, n := utf8.DecodeRune(b)
		if r != utf8.RuneError || n > 1 {
			dst = append(dst, b[:n]...)
			b = b[n:]
			continue
		}
		dst = append(dst, "\uFFFD"...)
		b = b[maximalSubpart(b):]
	}
	return dst
}

// maximalSubpart returns the length of the maximal prefix of b that is the
// start of a well-formed UTF-8 sequence, or 1 if there is none. b does not
// begin with a complete, valid sequence.
func maximalSubpart(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}
