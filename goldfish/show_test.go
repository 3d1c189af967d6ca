package goldfish

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data/tokenizer"
)

func TestAppendJSON(t *testing.T) {
	for _, c := range []struct {
		ids              []int32
		drop             []bool
		dropped, targets int
		want             string
	}{
		{[]int32{5, 6, 7}, []bool{false, true, false}, 1, 2, `{"ids":[5,6,7],"drop":[0,1,0],"dropped":1,"fraction":0.5}`},
		{[]int32{5}, []bool{false}, 0, 0, `{"ids":[5],"drop":[0],"dropped":0,"fraction":0}`},
		{nil, nil, 0, 0, `{"ids":[],"drop":[],"dropped":0,"fraction":0}`},
	} {
		if got := string(AppendJSON([]byte("x"), c.ids, c.drop, c.dropped, c.targets)); got != "x"+c.want {
			t.Errorf("AppendJSON(%v, %v) = %s, want x%s", c.ids, c.drop, got, c.want)
		}
	}
}

// TestAppendShown: without a decoder the ids are shown; with one, the
// pieces put together are the decoded text — characters split across
// tokens and SentencePiece's leading spaces included — and each dropped
// token is marked on its own.
func TestAppendShown(t *testing.T) {
	ids, drop := []int32{1, 2, 3}, []bool{false, true, false}
	if got, want := string(AppendShown(nil, nil, ids, drop, Brackets)), "1 [[2]] 3"; got != want {
		t.Errorf("ids: %q, want %q", got, want)
	}
	if got, want := string(AppendShown(nil, nil, ids, drop, ReverseVideo)), "1 \x1b[7m2\x1b[27m 3"; got != want {
		t.Errorf("reverse video: %q, want %q", got, want)
	}
	tok := llama3(t)
	m, err := New(Config{Strategy: HashTable, K: 3, H: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{
		"It is a truth universally acknowledged, that a single man",
		"naïve café — 東京の天気は晴れです 🙂🙂 done",
	} {
		ids, err := tok.EncodeChecked(text, tokenizer.EncodeOptions{AddSpecial: false})
		if err != nil {
			t.Fatal(err)
		}
		drop, _, dropped := m.Drops(ids, true)
		if dropped == 0 {
			t.Fatalf("%q: nothing dropped; the test needs drops", text)
		}
		shown := string(AppendShown(nil, tok, ids, drop, Brackets))
		if n := strings.Count(shown, "[["); n != dropped {
			t.Errorf("%q: %d marked, %d dropped: %s", text, n, dropped, shown)
		}
		if got := strings.NewReplacer("[[", "", "]]", "").Replace(shown); got != tok.Decode(ids) {
			t.Errorf("%q: shown %q, pieces %q, want the decoded text %q", text, shown, got, tok.Decode(ids))
		}
	}
}
