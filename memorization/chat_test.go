package memorization

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

// handChat is a conversation laid out as a chat template renders one,
// with its loss mask: BOS, a system prompt, then three user turns each
// followed by an assistant header (prompt, mask 0) and an answer (mask 1)
// of 5, 2 and 10 tokens.
func handChat() (ids []int32, mask []uint8) {
	add := func(m uint8, toks ...int32) {
		for _, t := range toks {
			ids = append(ids, t)
			mask = append(mask, m)
		}
	}
	add(0, 1)      // BOS
	add(0, 10, 11) // the system prompt, before the first user turn
	add(0, 12, 13) // user 1
	add(0, 9)      // assistant header
	add(1, 20, 21, 22, 23, 24)
	add(0, 15, 16, 9) // user 2, header
	add(1, 30, 31)
	add(0, 17, 9) // user 3, header
	add(1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49)
	return ids, mask
}

// TestChatProbes: a probe per assistant answer, whose prefix is the whole
// conversation before it (BOS and system prompt included) plus the
// answer's first P tokens and whose suffix is the answer's next S tokens,
// truncated to the answer's end; an answer of ≤ P tokens has no probe.
func TestChatProbes(t *testing.T) {
	ids, mask := handChat()
	type want struct {
		answer, k int
		suffix    []int32
	}
	for _, tc := range []struct {
		p     Protocol
		want  []want
		short int
	}{
		{Chat(0, 50), []want{{1, 6, []int32{20, 21, 22, 23, 24}}, {2, 14, []int32{30, 31}}, {3, 18, []int32{40, 41, 42, 43, 44, 45, 46, 47, 48, 49}}}, 0},
		{Chat(0, 4), []want{{1, 6, []int32{20, 21, 22, 23}}, {2, 14, []int32{30, 31}}, {3, 18, []int32{40, 41, 42, 43}}}, 0},
		{Chat(2, 4), []want{{1, 8, []int32{22, 23, 24}}, {3, 20, []int32{42, 43, 44, 45}}}, 1},
		{Chat(4, 50), []want{{1, 10, []int32{24}}, {3, 22, []int32{44, 45, 46, 47, 48, 49}}}, 1},
		{Chat(5, 50), []want{{3, 23, []int32{45, 46, 47, 48, 49}}}, 2},
		{Chat(10, 50), nil, 3},
	} {
		t.Run(tc.p.String(), func(t *testing.T) {
			if err := tc.p.Validate(); err != nil {
				t.Fatal(err)
			}
			probes, short := tc.p.ChatProbes(7, ids, mask)
			if len(probes) != len(tc.want) || short != tc.short {
				t.Fatalf("%d probes, %d short; want %d, %d", len(probes), short, len(tc.want), tc.short)
			}
			for i, pr := range probes {
				w := tc.want[i]
				if pr.Doc != 7 || pr.Answer != w.answer || pr.K != w.k || len(pr.Prefix) != w.k || !slices.Equal(pr.Suffix, w.suffix) {
					t.Errorf("probe %d: answer %d, K %d, prefix %d tokens, suffix %v; want answer %d, K %d, suffix %v",
						i, pr.Answer, pr.K, len(pr.Prefix), pr.Suffix, w.answer, w.k, w.suffix)
				}
				if !slices.Equal(pr.Prefix, ids[:w.k]) {
					t.Errorf("probe %d: prefix %v, not the conversation's first %d tokens", i, pr.Prefix, w.k)
				}
			}
			if tc.p.Probes(7, ids) != nil {
				t.Error("Probes without the mask cut a conversation")
			}
		})
	}
	// The first answer's prompt holds BOS, the system prompt, the user
	// turn and the assistant header.
	probes, _ := Chat(0, 50).ChatProbes(0, ids, mask)
	if !slices.Equal(probes[0].Prefix, []int32{1, 10, 11, 12, 13, 9}) {
		t.Errorf("first prompt %v", probes[0].Prefix)
	}
	// An answer at the very start has nothing to prompt with; a mask of
	// the wrong length makes no probe.
	if ps, short := Chat(0, 50).ChatProbes(0, []int32{5, 6, 7}, []uint8{1, 1, 0}); ps != nil || short != 1 {
		t.Errorf("an answer at token 0: %v, %d short", ps, short)
	}
	if ps, _ := Chat(0, 50).ChatProbes(0, ids, mask[1:]); ps != nil {
		t.Errorf("a short mask: %v", ps)
	}
	// An EOS the dataset appends (mask 1) extends the last answer.
	ps, _ := Chat(0, 50).ChatProbes(0, append(slices.Clone(ids), 2), append(slices.Clone(mask), 1))
	if last := ps[len(ps)-1].Suffix; last[len(last)-1] != 2 || len(last) != 11 {
		t.Errorf("last answer with EOS: %v", last)
	}
	if got := Chat(8, 20).String(); got != "chat(prompt + 8 answer tokens, suffix 20)" {
		t.Errorf("String %q", got)
	}
	for _, bad := range []Protocol{Chat(-1, 50), Chat(0, 0), {Name: "chat", SuffixLen: 50}, {Name: "chat", SuffixLen: 50, PrefixLens: []int{1, 2}}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// chatDocs makes conversations for the tiny model: members whose answers
// (two a conversation, the second after another user turn) are the
// model's own greedy continuations of the conversation so far, and
// non-members whose answers are random. The third member's second answer
// is one token, too short for an answer prefix of 1.
func chatDocs(t *testing.T, m *llama.Model) []Document {
	t.Helper()
	random := randomIDs(rand.New(rand.NewPCG(9, 10)))
	var docs []Document
	for i := range 8 {
		member := i < 4
		var ids []int32
		var mask []uint8
		for turn := range 2 {
			prompt := random(6 + i)
			ids = append(ids, prompt...)
			mask = append(mask, make([]uint8, len(prompt))...)
			n := 6 + turn
			if i == 2 && turn == 1 {
				n = 1
			}
			answer := random(n)
			if member {
				gen, err := m.Generate([][]int32{ids}, llama.GenerateOptions{MaxNewTokens: n})
				if err != nil {
					t.Fatal(err)
				}
				answer = gen[0]
			}
			ids = append(ids, answer...)
			for range answer {
				mask = append(mask, 1)
			}
		}
		docs = append(docs, Document{ID: i, Member: member, IDs: ids, Mask: mask})
	}
	return docs
}

// TestEvaluateChat: the chat protocol extracts the members' answers that
// are the model's own continuations (every one at answer prefix 0 and 1),
// not the non-members' random ones; it scores membership over the
// answers' tokens alone; an answer too short is counted (an error with
// Strict); documents without a mask are refused; Extraction agrees.
func TestEvaluateChat(t *testing.T) {
	m := tinyModel(t)
	docs := chatDocs(t, m)
	for _, P := range []int{0, 1} {
		p := Chat(P, 50)
		sum, res, err := Evaluate(m, docs, EvalConfig{Protocol: p, Batch: 3, Bootstrap: Bootstrap{Resamples: 20, Seed: 1}})
		if err != nil {
			t.Fatal(err)
		}
		short := 0
		if P == 1 {
			short = 1
		}
		if sum.Name != "chat" || sum.Protocol != p.String() || sum.Members != 4 || sum.NonMembers != 4 || sum.Skipped != 0 || sum.SkippedAnswers != short {
			t.Fatalf("P=%d: summary %+v", P, sum)
		}
		if len(sum.Prefixes) != 1 || sum.Prefixes[0].K != P {
			t.Fatalf("P=%d: prefixes %+v", P, sum.Prefixes)
		}
		mem, non := sum.Prefixes[0].Members, sum.Prefixes[0].NonMembers
		if mem.Documents != 8-short || mem.Exact.Mean != 1 || mem.TokenMatch.Mean != 1 || mem.RougeLTokens.Mean != 1 {
			t.Errorf("P=%d: members %+v, want every answer extracted", P, mem)
		}
		if non.Documents != 8 || non.Exact.Mean != 0 || !(non.TokenMatch.Mean < 0.5) {
			t.Errorf("P=%d: non-members %+v, want nothing extracted", P, non)
		}
		if res[2].ShortAnswers != short || len(res[2].Probes) != 2-short {
			t.Errorf("P=%d: document 2 %+v", P, res[2])
		}
		for _, r := range res {
			for j, pr := range r.Probes {
				if pr.Answer != j+1 || pr.K != prefixLen(docs[r.Doc], pr.Answer)+P || len(pr.Suffix) != answerLen(docs[r.Doc], pr.Answer)-P {
					t.Errorf("P=%d: document %d probe %d: answer %d, K %d, suffix %d", P, r.Doc, j, pr.Answer, pr.K, len(pr.Suffix))
				}
			}
		}
		if e, err := Extraction(m, docs, ExtractionConfig{Protocol: p, Batch: 2}); err != nil || e.Protocol != p.Key() ||
			e.Members != (ExtractionGroup{mem.Documents, mem.Exact.Mean, mem.TokenMatch.Mean}) ||
			e.NonMembers == nil || *e.NonMembers != (ExtractionGroup{non.Documents, non.Exact.Mean, non.TokenMatch.Mean}) {
			t.Errorf("P=%d: Extraction %+v (%v), Evaluate's %+v %+v", P, e, err, mem, non)
		}
		var buf bytes.Buffer
		if err := WriteTable(&buf, sum); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "prompt+"+string(rune('0'+P))) || !strings.Contains(buf.String(), "answers too short for a probe") {
			t.Errorf("P=%d: table\n%s", P, buf.String())
		}
	}
	if p := Chat(0, 50).Key(); p != "chat-0-50" {
		t.Errorf("key %q", p)
	}

	// A document's loss is the mean over its answers' tokens only.
	_, res, err := Evaluate(m, docs, EvalConfig{Protocol: Chat(0, 50), Bootstrap: Bootstrap{Resamples: 10}})
	if err != nil {
		t.Fatal(err)
	}
	d := docs[5]
	T := len(d.IDs) - 1
	tl, err := m.TokenLosses(llama.Batch{B: 1, T: T, IDs: d.IDs[:T], Targets: d.IDs[1:]})
	if err != nil {
		t.Fatal(err)
	}
	want, n := 0.0, 0
	for i, l := range tl {
		if d.Mask[i+1] == 1 {
			want += float64(l)
			n++
		}
	}
	want /= float64(n)
	if err := numtest.Scalar(res[5].Loss, want, numtest.Tol{Rel: 1e-5}); err != nil {
		t.Errorf("document loss against the answers': %v", err)
	}

	// Strict refuses the short answer; a document without its mask is
	// refused by Evaluate, Extraction and CheckExtraction.
	if _, _, err := Evaluate(m, docs, EvalConfig{Protocol: Chat(1, 50), Strict: true}); err == nil || !strings.Contains(err.Error(), "1 of 16 answers are too short") {
		t.Errorf("strict: %v", err)
	}
	bare := append(slices.Clone(docs), Document{ID: 8, IDs: docs[0].IDs})
	const noMask = "document 8 has no loss mask (want a chat dataset's conversations, memtrain data prepare --chat)"
	if _, _, err := Evaluate(m, bare, EvalConfig{Protocol: Chat(0, 50)}); err == nil || !strings.Contains(err.Error(), noMask) {
		t.Errorf("Evaluate without a mask: %v", err)
	}
	if _, err := Extraction(m, bare, ExtractionConfig{Protocol: Chat(0, 50)}); err == nil || !strings.Contains(err.Error(), noMask) {
		t.Errorf("Extraction without a mask: %v", err)
	}
	if _, _, err := CheckExtraction(bare, Chat(0, 50), 96); err == nil || !strings.Contains(err.Error(), noMask) {
		t.Errorf("CheckExtraction without a mask: %v", err)
	}
	if n, skipped, err := CheckExtraction(docs, Chat(0, 50), 96); err != nil || n != 16 || skipped != 0 {
		t.Errorf("CheckExtraction: %d probes, %d skipped, %v", n, skipped, err)
	}
	// The other protocols ignore the mask.
	if _, _, err := Evaluate(m, bare, EvalConfig{Protocol: Custom(4, 4), Bootstrap: Bootstrap{Resamples: 10}}); err != nil {
		t.Errorf("custom protocol on conversations: %v", err)
	}
}

// prefixLen is the number of tokens before answer n (from 1) of d.
func prefixLen(d Document, n int) int {
	a, _ := answerSpan(d, n)
	return a
}

// answerLen is the length of answer n (from 1) of d.
func answerLen(d Document, n int) int {
	a, b := answerSpan(d, n)
	return b - a
}

func answerSpan(d Document, n int) (a, b int) {
	for i := 0; i < len(d.Mask); {
		if d.Mask[i] == 0 {
			i++
			continue
		}
		j := i
		for j < len(d.Mask) && d.Mask[j] == 1 {
			j++
		}
		if n--; n == 0 {
			return i, j
		}
		i = j
	}
	return -1, -1
}
