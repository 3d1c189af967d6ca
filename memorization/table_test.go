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

// TestWriteTableMIA: the attacks' AUCs and TPRs at low FPR, and how many
// false positives the non-members allow.
func TestWriteTableMIA(t *testing.T) {
	s := &Summary{Protocol: "pythia(prefix 4, suffix 4)", Name: "pythia", Documents: 250, Members: 50, NonMembers: 200,
		Prefixes: []PrefixSummary{{K: 4, Members: Group{Documents: 50}, NonMembers: Group{Documents: 200}}},
		MIA: MIA{LossAUC: 0.75, LossTPR1: 0.12, LossTPR01: 0.02, MinKAUC: 0.7, MinKTPR1: 0.1, MinKPercent: 20,
			Reference: true, RefAUC: 0.9, RefTPR1: 0.5, RefTPR01: 0.25}}
	var b bytes.Buffer
	if err := WriteTable(&b, s); err != nil {
		t.Fatal(err)
	}
	out := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{"TPR at 1% FPR %", "loss 0.750 12.0 2.0", "min-20% prob 0.700 10.0 0.0", "reference (loss − reference loss) 0.900 50.0 25.0",
		"(200 non-members: 2 false positives allowed at 1% FPR, none at 0.1%)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "zlib") {
		t.Errorf("zlib without decoded words:\n%s", out)
	}
}
