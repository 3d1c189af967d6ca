package tokenizer

import (
	"slices"
	"testing"
)

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		family string
		file   string
		tok    func(testing.TB) *Tokenizer
	}{
		{"llama2", "testdata/llama2.jsonl", llama2},
		{"llama3", "testdata/llama3.jsonl", llama3},
	} {
		t.Run(tc.family, func(t *testing.T) {
			tok := tc.tok(t)
			cases := readGolden(t, tc.file)
			if len(cases) != 303 {
				t.Errorf("%s has %d cases, want 303", tc.file, len(cases))
			}
			var failed []string
			for _, c := range cases {
				ok := true
				if got := tok.Encode(c.Text, EncodeOptions{}); !slices.Equal(got, c.IDs) {
					t.Errorf("%s: Encode(%.60q) = %v, want %v", c.Name, c.Text, clipIDs(got), clipIDs(c.IDs))
					ok = false
				}
				if got := tok.Encode(c.Text, EncodeOptions{AddSpecial: true}); !slices.Equal(got, c.IDsWithSpecial) {
					t.Errorf("%s: Encode(%.60q, AddSpecial) = %v, want %v", c.Name, c.Text, clipIDs(got), clipIDs(c.IDsWithSpecial))
					ok = false
				}
				want := c.IDsSpecialAsText
				if want == nil {
					want = c.IDs
				}
				if got := tok.Encode(c.Text, EncodeOptions{SplitSpecial: true}); !slices.Equal(got, want) {
					t.Errorf("%s: Encode(%.60q, SplitSpecial) = %v, want %v", c.Name, c.Text, clipIDs(got), clipIDs(want))
					ok = false
				}
				if got := tok.Decode(c.IDs); got != c.Decoded {
					t.Errorf("%s: Decode = %.80q, want %.80q", c.Name, got, c.Decoded)
					ok = false
				}
				if !ok {
					failed = append(failed, c.Name)
				}
			}
			if len(failed) > 0 {
				t.Errorf("%d of %d golden cases failed: %v", len(failed), len(cases), failed)
			}
		})
	}
}

func clipIDs(ids []int32) []int32 {
	if len(ids) > 24 {
		return ids[:24]
	}
	return ids
}
