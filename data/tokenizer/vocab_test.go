package tokenizer

import "testing"

// TestKindAndMerges: each kind of id in the real tokenizers, and their
// merge lists in the order of tokenizer.json (the first and last merges).
func TestKindAndMerges(t *testing.T) {
	l2, l3 := llama2(t), llama3(t)
	for _, c := range []struct {
		tok  *Tokenizer
		id   int32
		want TokenKind
	}{
		{l2, 0, KindUnknown}, {l2, 1, KindSpecial}, {l2, 2, KindSpecial}, {l2, 13, KindByte}, {l2, 260, KindNormal},
		{l2, 32000, KindNone}, {l2, -1, KindNone},
		{l3, 279, KindNormal}, {l3, 128000, KindSpecial}, {l3, 128255, KindSpecial}, {l3, 128256, KindNone},
	} {
		if got := c.tok.Kind(c.id); got != c.want {
			t.Errorf("%s: Kind(%d) = %d, want %d", c.tok.Family(), c.id, got, c.want)
		}
	}
	for _, c := range []struct {
		tok         *Tokenizer
		n           int
		first, last [3]string
	}{
		{l2, 61249, [3]string{"▁", "t", "▁t"}, [3]string{"▁", "▁", "▁▁"}},
		{l3, 280147, [3]string{"Ġ", "Ġ", "ĠĠ"}, [3]string{"éĶ", "¦", "éĶ¦"}},
	} {
		m := c.tok.Merges()
		if len(m) != c.n {
			t.Fatalf("%s: %d merges, want %d", c.tok.Family(), len(m), c.n)
		}
		for i, w := range map[int][3]string{0: c.first, c.n - 1: c.last} {
			l, _ := c.tok.Token(m[i].Left)
			r, _ := c.tok.Token(m[i].Right)
			res, _ := c.tok.Token(m[i].Result)
			if [3]string{l, r, res} != w {
				t.Errorf("%s: merge %d is %q + %q → %q, want %q", c.tok.Family(), i, l, r, res, w)
			}
		}
	}
}
