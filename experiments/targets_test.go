package experiments

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data"
)

func TestSentences(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"One. Two! Three? Four", []string{"One.", "Two!", "Three?", "Four"}},
		{`He said "Stop." Then  left.`, []string{`He said "Stop."`, "Then  left."}},
		{"Mr.Smith 3.5 (yes.) no", []string{"Mr.Smith 3.5 (yes.)", "no"}},
		{"  ", nil},
	} {
		if got := sentences(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("sentences(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSelectTargets: lengths in range, deterministic for a seed, and no
// held-out document shares a run of Overlap tokens with a target, even
// when the corpus repeats a long boilerplate sentence.
func TestSelectTargets(t *testing.T) {
	tok, _, err := data.OpenTokenizer("builtin:llama2")
	if err != nil {
		t.Fatal(err)
	}
	boiler := "The Senate and the House of Representatives of the United States of America in Congress assembled have heard this sentence repeated many times over the years, word for word, in every single address."
	var lines []string
	words := strings.Fields("liberty union commerce treasury navy army revenue harbor tariff frontier credit peace treaty")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 60 {
		var b strings.Builder
		for range 30 {
			b.WriteString(words[rng.IntN(len(words))] + " ")
		}
		text := b.String() + "end."
		if i%3 == 0 {
			text = boiler + " " + text
		}
		raw, _ := json.Marshal(map[string]string{"text": text})
		lines = append(lines, string(raw))
	}
	path := filepath.Join(t.TempDir(), "c.jsonl")
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	tg := &Targets{Count: 10, Holdout: 10, MinTokens: 20, MaxTokens: 120, Seed: 3, Overlap: 20}
	sel, err := SelectTargets(tg, []string{path}, tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(sel.Targets) != 10 || len(sel.Holdout) != 10 || sel.Overlapping == 0 {
		t.Fatalf("%d targets, %d held out, %d overlapping", len(sel.Targets), len(sel.Holdout), sel.Overlapping)
	}
	boilers := 0
	for _, p := range append(append([]Passage(nil), sel.Targets...), sel.Holdout...) {
		if n := len(p.IDs); n < 20 || n > 120 {
			t.Errorf("passage of %d tokens", n)
		}
		if strings.HasPrefix(p.Text, "The Senate") {
			boilers++
		}
	}
	if boilers != 1 {
		t.Errorf("%d chosen documents carry the boilerplate, want exactly 1", boilers)
	}
	again, _ := SelectTargets(tg, []string{path}, tok)
	if !reflect.DeepEqual(sel, again) {
		t.Error("selection is not deterministic")
	}
	tg.Seed = 4
	other, _ := SelectTargets(tg, []string{path}, tok)
	if reflect.DeepEqual(sel.Targets, other.Targets) {
		t.Error("the seed does not change the selection")
	}
	tg.Count = 100
	if _, err := SelectTargets(tg, []string{path}, tok); err == nil || !strings.Contains(err.Error(), "need 100 targets + 10 held out") {
		t.Errorf("too few candidates: %v", err)
	}
}
