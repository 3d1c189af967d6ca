package memorization

import (
	"bytes"
	"strings"
	"testing"
)

// TestWriteTable: eval memorization's table writes every rate in percent,
// ROUGE-L included, as the study report does, and a large perplexity in
// readable form.
func TestWriteTable(t *testing.T) {
	iv := func(m, lo, hi float64) Interval { return Interval{Mean: m, Lo: lo, Hi: hi} }
	s := &Summary{Protocol: "carlini(prefix 16, suffix 50)", Name: "carlini", Documents: 2, Members: 1, NonMembers: 1,
		Prefixes: []PrefixSummary{{K: 16,
			Members:    Group{Documents: 1, Exact: iv(1, 1, 1), TokenMatch: iv(1, 1, 1), RougeLTokens: iv(0.5, 0.25, 0.75), RougeLWords: iv(0.125, 0.1, 0.2), Loss: iv(0.03, 0.03, 0.03), Perplexity: 1.0305},
			NonMembers: Group{Documents: 1, Loss: iv(15.66, 15.66, 15.66), Perplexity: 6328650.98},
		}},
	}
	var b bytes.Buffer
	if err := WriteTable(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"ROUGE-L tokens %", "ROUGE-L words %", "50.0 [25.0, 75.0]", "12.5 [10.0, 20.0]", "6.33e6", "1.03"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "6328650") {
		t.Errorf("perplexity written in full:\n%s", out)
	}
}
