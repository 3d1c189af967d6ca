package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// allocated returns the bytes that f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// bomb returns a tokenizer.json whose normalizer (or decoder, if decoder)
// is n Replace of "a" by k of them.
func bomb(n, k int, decoder bool) string {
	var rs []string
	for range n {
		rs = append(rs, fmt.Sprintf(`{"type": "Replace", "pattern": {"String": "a"}, "content": %q}`, strings.Repeat("a", k)))
	}
	if decoder {
		return minimal(okModel, `"decoder": {"type": "Sequence", "decoders": [`+strings.Join(rs, ", ")+`]}`)
	}
	return minimal(okModel, `"normalizer": {"type": "Sequence", "normalizers": [`+strings.Join(rs, ", ")+`]}`)
}

// TestNormalizerExpansionBounded checks that chained Replace normalizers
// (and decoders) that would blow a text up fail with an error that names
// the one that passed its bound, having allocated little.
func TestNormalizerExpansionBounded(t *testing.T) {
	text := strings.Repeat("a", 49)
	for _, c := range []struct {
		n, k  int
		field string
	}{
		{6, 1000, "normalizer.normalizers[0]"}, // 49 kB from 49 bytes: the normalizer's bound
		{6, 16, "normalizer.normalizers[1]"},   // 784 bytes, then 12.5 kB: its bound again
		{6, 4, "normalizer.normalizers[3]"},    // 196, 784, 3136, then 12.5 kB: the text's bound
	} {
		tok, err := Parse("bomb.json", []byte(bomb(c.n, c.k, false)), nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int32
		n := allocated(func() { ids, err = tok.EncodeChecked(text, EncodeOptions{}) })
		want := "tokenizer: bomb.json: " + c.field + ": would write "
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%d×%d: EncodeChecked = %d ids, %v; want error %q…", c.n, c.k, len(ids), err, want)
		}
		if n > 1<<20 {
			t.Errorf("%d×%d: %d bytes allocated", c.n, c.k, n)
		}

		tok, err = Parse("bomb.json", []byte(bomb(c.n, c.k, true)), nil)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		ids = slices.Repeat([]int32{0}, 49) // "a" 49 times
		n = allocated(func() { s, err = tok.DecodeChecked(ids, false) })
		want = "tokenizer: bomb.json: decoder.decoders[" + c.field[len("normalizer.normalizers["):]
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%d×%d: DecodeChecked = %d bytes, %v; want error %q…", c.n, c.k, len(s), err, want)
		}
		if n > 1<<20 {
			t.Errorf("%d×%d: decoding allocated %d bytes", c.n, c.k, n)
		}
	}

	// A Prepend too long for the text; the added tokens are normalized
	// when the file is read.
	long := strings.Repeat("x", 10000)
	tok, err := Parse("prepend.json", []byte(minimal(okModel, `"normalizer": {"type": "Prepend", "prepend": "`+long+`"}`)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.EncodeChecked("a", EncodeOptions{}); err == nil || !strings.HasPrefix(err.Error(), "tokenizer: prepend.json: normalizer: would write 10001 bytes from 1, past its bound of 4104 bytes") {
		t.Errorf("EncodeChecked with a long Prepend: %v", err)
	}
	_, err = Parse("bomb.json", []byte(strings.TrimSuffix(bomb(6, 16, false), "}")+`, "added_tokens": [{"id": 5, "content": "aaaaaaaaaa"}]}`), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "tokenizer: bomb.json: normalizer.normalizers[2]: would write ") ||
		!strings.HasSuffix(err.Error(), `(normalizing added token "aaaaaaaaaa")`) {
		t.Errorf("Parse with a normalized added token: %v", err)
	}

	// Llama 2 writes three bytes for a space: far within the bounds.
	spaces := strings.Repeat(" ", 100000)
	if ids, err := llama2(t).EncodeChecked(spaces, EncodeOptions{}); err != nil || len(ids) == 0 {
		t.Errorf("Llama 2 on %d spaces: %d ids, %v", len(spaces), len(ids), err)
	}
}

// TestBPELongWordMemory checks that the BPE merge of a long word takes a
// few bytes a character (about 100 before it held the symbols in structs
// and grew its slices), and gives the same tokens as the merge of HF's
// Word::merge_all.
func TestBPELongWordMemory(t *testing.T) {
	const n = 1 << 18
	r := rand.New(rand.NewPCG(1, 2))
	letters := make([]byte, n)
	for i := range letters {
		letters[i] = byte('a' + r.IntN(26))
	}
	for _, c := range []struct {
		name string
		tok  *Tokenizer
		text string
	}{
		{"llama2 a", llama2(t), strings.Repeat("a", n)},
		{"llama3 a", llama3(t), strings.Repeat("a", n)},
		{"llama2 letters", llama2(t), string(letters)},
		{"llama3 letters", llama3(t), string(letters)},
	} {
		tok := c.tok
		tok.Encode("warm up", EncodeOptions{})
		var ids []int32
		perChar := float64(allocated(func() { ids = tok.Encode(c.text, EncodeOptions{}) })) / n
		t.Logf("%s: %.1f bytes a character", c.name, perChar)
		// 8 for the list, 10 for the heap, 4 for the symbols, and a few
		// for the text normalized and as bytes, and the ids.
		if perChar > 32 {
			t.Errorf("%s: %.1f bytes allocated a character, want at most 32", c.name, perChar)
		}
		// The same ids as HF's merge (below) of the one word of the text.
		w := "▁" + c.text
		if tok.byteLevel {
			w = string(appendByteLevel(nil, c.text))
		}
		st := &encState{}
		want := hfMerge(tok.model, tok.model.initialSymbols(st, []byte(w)))
		if !slices.Equal(ids, want) {
			t.Errorf("%s: %d ids, want %d: %v…, want %v…", c.name, len(ids), len(want), clipIDs(ids), clipIDs(want))
		}
	}
}

// hfMerge is HF's Word::merge_all, as this package had it: symbols in a
// doubly linked list, and a heap of candidate merges that are stale if the
// pair no longer merges into the same token.
func hfMerge(m *bpe, ids []int32) []int32 {
	type symbol struct{ id, prev, next int32 }
	type candidate struct{ rank, pos, id int32 }
	less := func(a, b candidate) bool { return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos }
	syms := make([]symbol, len(ids))
	for k, id := range ids {
		syms[k] = symbol{id, int32(k - 1), int32(k + 1)}
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	var h []candidate
	push := func(c candidate) {
		h = append(h, c)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !less(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() candidate {
		top := h[0]
		h[0] = h[len(h)-1]
		h = h[:len(h)-1]
		for i := 0; ; {
			l, j := 2*i+1, 2*i+1
			if l >= len(h) {
				break
			}
			if l+1 < len(h) && less(h[l+1], h[l]) {
				j = l + 1
			}
			if !less(h[j], h[i]) {
				break
			}
			h[i], h[j] = h[j], h[i]
			i = j
		}
		return top
	}
	for k := 0; k+1 < len(syms); k++ {
		if mg := m.mergeOf(syms[k].id, syms[k+1].id); mg.id >= 0 {
			push(candidate{mg.rank, int32(k), mg.id})
		}
	}
	for len(h) > 0 {
		top := pop()
		s := &syms[top.pos]
		if s.id < 0 || s.next < 0 {
			continue
		}
		right := &syms[s.next]
		if m.mergeOf(s.id, right.id).id != top.id {
			continue
		}
		s.id, right.id = top.id, -1
		s.next = right.next
		if s.next >= 0 {
			syms[s.next].prev = top.pos
		}
		if s.prev >= 0 {
			if mg := m.mergeOf(syms[s.prev].id, s.id); mg.id >= 0 {
				push(candidate{mg.rank, s.prev, mg.id})
			}
		}
		if s.next >= 0 {
			if mg := m.mergeOf(s.id, syms[s.next].id); mg.id >= 0 {
				push(candidate{mg.rank, top.pos, mg.id})
			}
		}
	}
	var out []int32
	for _, s := range syms {
		if s.id >= 0 {
			out = append(out, s.id)
		}
	}
	return out
}

// TestMergeLargeRandom checks mergeLarge against HF's merge on random
// vocabularies, with merges built like tiktoken's (a token may be made by
// several pairs), and against mergeSmall on any vocabulary, such as ones
// where tokens share ids (then HF's merge may differ, as mergeSmall
// always did).
func TestMergeLargeRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 200 {
		tokens := []string{"a", "b", "c"}
		vocab := map[string]int32{"a": 0, "b": 1, "c": 2}
		var pairs [][2]string
		for range 30 {
			x, y := tokens[r.IntN(len(tokens))], tokens[r.IntN(len(tokens))]
			if _, ok := vocab[x+y]; !ok {
				vocab[x+y] = int32(len(vocab))
				tokens = append(tokens, x+y)
			}
			pairs = append(pairs, [2]string{x, y})
		}
		shared := trial%4 == 3
		if shared {
			// Some tokens share an id.
			for k := range 5 {
				vocab[tokens[3+r.IntN(len(tokens)-3)]] = int32(3 + k)
			}
		}
		m := &bpe{vocab: vocab, merges: map[uint64]merge{}, unk: -1}
		for i, p := range pairs {
			m.merges[pairKey(vocab[p[0]], vocab[p[1]])] = merge{int32(i), vocab[p[0]+p[1]]}
		}
		m.initLookups()
		st := &encState{}
		for range 20 {
			w := make([]byte, 1+r.IntN(300))
			for i := range w {
				w[i] = "abc"[r.IntN(3)]
			}
			large := slices.Clone(m.mergeLarge(st, m.initialSymbols(st, w)))
			small := slices.Clone(m.mergeSmall(st, m.initialSymbols(st, w)))
			if !slices.Equal(large, small) {
				t.Fatalf("trial %d, %q: mergeLarge %v, mergeSmall %v", trial, w, large, small)
			}
			if hf := hfMerge(m, m.initialSymbols(st, w)); !shared && !slices.Equal(large, hf) {
				t.Fatalf("trial %d, %q: mergeLarge %v, HF %v", trial, w, large, hf)
			}
		}
	}
}

// TestWordBounded: a word past MaxWordBytes is refused, saying why,
// before its merge allocates; one at the bound still encodes.
func TestWordBounded(t *testing.T) {
	tok, err := Parse("t.json", []byte(minimal(okModel)), nil)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("ab", MaxWordBytes/2+1)
	var ids []int32
	n := allocated(func() { ids, err = tok.EncodeChecked(long, EncodeOptions{}) })
	if err == nil || !strings.Contains(err.Error(), "is longer than the 16777216 one can be") {
		t.Errorf("a word of %d bytes: %d ids, %v", len(long), len(ids), err)
	}
	if n > 64<<20 {
		t.Errorf("refusing it allocated %d bytes", n)
	}
	if ids, err := tok.EncodeChecked(long[:MaxWordBytes], EncodeOptions{}); err != nil || len(ids) != MaxWordBytes/2 {
		t.Errorf("a word at the bound: %d ids, %v", len(ids), err)
	}
}

// TestUnicodeForms checks the NFC, NFD, NFKC and NFKD normalizers, that
// they keep invalid UTF-8, and the bound on NFKD, which writes 18
// characters for U+FDFA.
func TestUnicodeForms(t *testing.T) {
	for _, c := range []struct{ form, in, want string }{
		{"NFC", "e\u0301t\u00e9 \u212b", "\u00e9t\u00e9 \u00c5"},
		{"NFD", "\u00e9", "e\u0301"},
		{"NFKC", "\ufb01 \u2460", "fi 1"},
		{"NFKD", "\u00e9\ufb01", "e\u0301fi"},
		{"NFC", "a\xffe\u0301", "a\xff\u00e9"},
	} {
		tok, err := Parse("forms.json", []byte(minimal(okModel, `"normalizer": {"type": "`+c.form+`"}`)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tok.normalize(c.in); got != c.want || err != nil {
			t.Errorf("%s(%+q) = %+q, %v; want %+q", c.form, c.in, got, err, c.want)
		}
	}
	tok, err := Parse("forms.json", []byte(minimal(okModel, `"normalizer": {"type": "NFKD"}`)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.normalize(strings.Repeat("\ufdfa", 2000)); err == nil ||
		!strings.HasPrefix(err.Error(), "tokenizer: forms.json: normalizer: would write 66000 bytes from 6000") {
		t.Errorf("NFKD of 2,000 U+FDFA: %v; want its bound's error", err)
	}
}
