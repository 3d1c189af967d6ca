package goldfish

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/numtest"
)

func mustNew(t testing.TB, c Config) *Masker {
	t.Helper()
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// maskString runs Mask and renders the weights as "0" (kept) / "1"
// (dropped), the fixtures' notation.
func maskString(m *Masker, ids []int32) (string, int) {
	w := make([]float32, len(ids))
	n := m.Mask(ids, w)
	return renderDrops(w), n
}

func renderDrops(w []float32) string {
	var b strings.Builder
	for _, v := range w {
		if v == 0 {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string // "" for valid
	}{
		{Config{Strategy: HashTable, K: 4, H: 13}, ""},
		{Config{Strategy: HashAvalanche, K: 2, H: 1}, ""},
		{Config{Strategy: Static, K: 4}, ""},
		{Config{Strategy: Static, K: 4, Start: 3, H: -5}, ""},     // Static ignores H
		{Config{Strategy: HashTable, K: 4, H: 13, Start: -1}, ""}, // hashes ignore Start
		{Config{K: 4, H: 13}, "goldfish: unknown strategy 0 (want Static, HashTable or HashAvalanche)"},
		{Config{Strategy: 9, K: 4, H: 13}, "goldfish: unknown strategy 9 (want Static, HashTable or HashAvalanche)"},
		{Config{Strategy: HashTable, K: 1, H: 13}, "goldfish: k must be ≥ 2, got 1"},
		{Config{Strategy: Static, K: 0}, "goldfish: k must be ≥ 2, got 0"},
		{Config{Strategy: Static, K: -3}, "goldfish: k must be ≥ 2, got -3"},
		{Config{Strategy: HashTable, K: 4}, "goldfish: h (the context width) must be ≥ 1 for the hash-table strategy, got 0"},
		{Config{Strategy: HashAvalanche, K: 4, H: -1}, "goldfish: h (the context width) must be ≥ 1 for the hash-avalanche strategy, got -1"},
		{Config{Strategy: Static, K: 4, Start: -1}, "goldfish: start must be ≥ 0, got -1"},
	} {
		err := tc.c.Validate()
		_, newErr := New(tc.c)
		if tc.want == "" {
			if err != nil || newErr != nil {
				t.Errorf("%+v: %v, %v", tc.c, err, newErr)
			}
			continue
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("%+v: Validate() = %v, want %q", tc.c, err, tc.want)
		}
		if newErr == nil || newErr.Error() != tc.want {
			t.Errorf("%+v: New() error %v, want %q", tc.c, newErr, tc.want)
		}
	}
}

func TestParseStrategy(t *testing.T) {
	for _, s := range []Strategy{Static, HashTable, HashAvalanche} {
		got, err := ParseStrategy(s.String())
		if err != nil || got != s {
			t.Errorf("ParseStrategy(%q) = %v, %v", s.String(), got, err)
		}
		b, err := s.MarshalText()
		if err != nil || string(b) != s.String() {
			t.Errorf("%v.MarshalText() = %s, %v", s, b, err)
		}
	}
	for _, name := range []string{"", "Static", "hash", "hash-legacy", "seeded_random", "hash_table"} {
		if _, err := ParseStrategy(name); err == nil || !strings.Contains(err.Error(), "want static, hash-table or hash-avalanche") {
			t.Errorf("ParseStrategy(%q): %v", name, err)
		}
	}
	if s := Strategy(0).String(); s != "Strategy(0)" {
		t.Errorf("Strategy(0).String() = %q", s)
	}
	if _, err := Strategy(7).MarshalText(); err == nil {
		t.Error("Strategy(7).MarshalText() succeeded")
	}
	// Config round-trips through JSON with the strategy's name.
	c := Config{Strategy: HashAvalanche, K: 4, H: 13}
	b, err := json.Marshal(c)
	if err != nil || string(b) != `{"strategy":"hash-avalanche","k":4,"h":13}` {
		t.Fatalf("json.Marshal = %s, %v", b, err)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || back != c {
		t.Errorf("round trip %+v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"strategy":"nope","k":4}`), &back); err == nil {
		t.Error("unknown strategy unmarshalled")
	}
	if got := (Config{Strategy: Static, K: 4, Start: 2}).String(); got != "static k=4 start=2" {
		t.Errorf("String() = %q", got)
	}
	if got := c.String(); got != "hash-avalanche k=4 h=13" {
		t.Errorf("String() = %q", got)
	}
}

func TestStatic(t *testing.T) {
	ids := func(n int) []int32 { return make([]int32, n) }
	for _, tc := range []struct {
		k, start, n int
		want        string
	}{
		{4, 0, 10, "1000100010"},
		{4, 1, 10, "0100010001"},
		{4, 3, 10, "0001000100"},
		{2, 0, 7, "1010101"},
		{3, 2, 9, "001001001"},
		{5, 4, 5, "00001"},
		{5, 5, 5, "00000"},            // start at the end: nothing
		{3, 100, 4, "0000"},           // start past the end
		{4, 0, 1, "1"},                // one target, dropped at start 0
		{4, 0, 0, ""},                 // no targets
		{math.MaxInt, 1, 6, "010000"}, // a huge k never overflows
		{2, math.MaxInt, 3, "000"},
	} {
		m := mustNew(t, Config{Strategy: Static, K: tc.k, Start: tc.start})
		got, n := maskString(m, ids(tc.n))
		if got != tc.want || n != strings.Count(tc.want, "1") {
			t.Errorf("k=%d start=%d n=%d: %s (%d dropped), want %s", tc.k, tc.start, tc.n, got, n, tc.want)
		}
	}
}

// TestHashHandComputed checks the hash strategies on contexts worked out by
// hand from the definitions.
func TestHashHandComputed(t *testing.T) {
	tab := Table()
	// h = 2, ids 3 5 -7 11: keys 15, -35, -77 (floor mod 1,000,003: 999968,
	// 999926).
	ids := []int32{3, 5, -7, 11}
	keys := []int64{15, TableSize - 35, TableSize - 77}
	for _, k := range []int{2, 3, 4, 8} {
		m := mustNew(t, Config{Strategy: HashTable, K: k, H: 2})
		want := "0"
		for _, key := range keys {
			if tab[key] < float32(1/float64(k)) {
				want += "1"
			} else {
				want += "0"
			}
		}
		if got, _ := maskString(m, ids); got != want {
			t.Errorf("hash-table k=%d: %s, want %s", k, got, want)
		}
	}
	// Wrapping products: 2³² · 2³² ≡ 0 (mod 2⁶⁴), and 65536⁴ too.
	x := int64(65536)
	if got := wang32(0); got != wang32(uint64(x*x*x*x)) {
		t.Errorf("wrapped product hashed differently")
	}
	// wang32 against a direct transcription of lit_gpt's hashint.
	ref := func(key uint64) uint64 {
		mask := uint64(1)<<32 - 1
		key = (^key + (key << 21)) & mask
		key = (key << 21) - key - 1
		key = key ^ key>>24
		key = ((key + (key << 3)) + (key << 8)) & mask
		key = key * 265
		key = key ^ key>>14
		key = ((key + (key << 2)) + (key << 4)) & mask
		key = key * 21
		key = key ^ key>>28
		key = (key + (key << 31)) & mask
		return key
	}
	for _, key := range []uint64{0, 1, 2, 0xFFFFFFFF, 1 << 32, math.MaxUint64, 1 << 63, 0x123456789abcdef0, uint64(1<<64 - 15)} {
		if got, want := wang32(key), ref(key); uint64(got) != want {
			t.Errorf("wang32(%#x) = %#x, want %#x", key, got, want)
		}
	}
	// Values of the reference's hashint, run by PyTorch on int64 keys.
	// Step 1 keeps only the low 32 bits of the key, so 0, 2³² and −2⁶³ hash
	// alike.
	for _, tc := range []struct {
		key  int64
		want uint32
	}{
		{0, 791250447}, {1, 4151993710}, {2, 2228655750}, {0xFFFFFFFF, 58270011},
		{1 << 32, 791250447}, {-1, 58270011}, {math.MinInt64, 791250447},
		{0x123456789abcdef0, 614398688}, {128000 * 791 * 4062, 54726435},
	} {
		if got := wang32(uint64(tc.key)); got != tc.want {
			t.Errorf("wang32(%d) = %d, want %d", tc.key, got, tc.want)
		}
	}
	// A context whose product is 0 drops iff hash(0) is below the cut.
	for _, k := range []int{2, 3, 4, 8} {
		m := mustNew(t, Config{Strategy: HashAvalanche, K: k, H: 3})
		got, _ := maskString(m, []int32{7, 0, 9, 9})
		want := "0000"
		if 791250447 < float32(math.MaxUint32)/float32(k) {
			want = "0011"
		}
		if got != want {
			t.Errorf("hash-avalanche k=%d: %s, want %s", k, got, want)
		}
	}
}

// TestShortSequences: the hash strategies never drop the first H−1 targets,
// so a sequence shorter than H keeps everything.
func TestShortSequences(t *testing.T) {
	for _, s := range []Strategy{HashTable, HashAvalanche} {
		for h := 1; h <= 14; h++ {
			m := mustNew(t, Config{Strategy: s, K: 2, H: h})
			for n := 0; n <= h+2; n++ {
				ids := make([]int32, n)
				for i := range ids {
					ids[i] = int32(1000 + 7*i)
				}
				got, _ := maskString(m, ids)
				if head := got[:min(h-1, n)]; strings.Contains(head, "1") {
					t.Errorf("%v n=%d: %s drops within the first h-1", m.Config(), n, got)
				}
			}
		}
	}
}

// TestDuplicates: the same document twice in a batch gets the same mask, and
// with the hash strategies so does a copy at another offset, once its
// context lies inside the copy.
func TestDuplicates(t *testing.T) {
	// Llama 3's ids of "It is a truth universally acknowledged, that a
	// single man in possession of a good fortune, must be in want of a
	// wife." and of "However little known the feelings or views of such a
	// man may be on his first entering a neighbourhood".
	doc := []int32{2181, 374, 264, 8206, 61528, 26579, 11, 430, 264, 3254, 893, 304, 19243, 315, 264, 1695, 33415, 11, 2011, 387, 304, 1390, 315, 264, 7555, 13}
	other := []int32{11458, 2697, 3967, 279, 16024, 477, 6325, 315, 1778, 264, 893, 1253, 387, 389, 813, 1176, 16661, 264, 40442}
	for _, c := range []Config{
		{Strategy: HashTable, K: 4, H: 13},
		{Strategy: HashTable, K: 2, H: 4},
		{Strategy: HashAvalanche, K: 4, H: 13},
		{Strategy: HashAvalanche, K: 3, H: 2},
		{Strategy: Static, K: 4},
	} {
		m := mustNew(t, c)
		// A batch of two rows, the same document.
		a, _ := maskString(m, doc)
		b, _ := maskString(m, doc)
		if a != b {
			t.Errorf("%v: the same document masked twice: %s, %s", c, a, b)
		}
		// Packed after another document.
		packed := slices.Concat(other, doc)
		p, _ := maskString(m, packed)
		p = p[len(other):]
		if c.Strategy.IsHash() {
			if p[c.H-1:] != a[c.H-1:] {
				t.Errorf("%v: copy at offset %d:\n%s\n%s", c, len(other), p, a)
			}
		} else if p == a && len(other)%c.K != 0 {
			t.Errorf("%v: static masks should move with the offset", c)
		}
	}
}

func TestApply(t *testing.T) {
	ids := make([]int32, 200)
	for i := range ids {
		ids[i] = int32(i*7919%128256 + 1)
	}
	for _, c := range []Config{
		{Strategy: HashTable, K: 3, H: 4},
		{Strategy: HashAvalanche, K: 2, H: 1},
		{Strategy: Static, K: 4, Start: 1},
	} {
		m := mustNew(t, c)
		mask := make([]float32, len(ids))
		nMask := m.Mask(ids, mask)

		// On all-ones weights, Apply is Mask.
		ones := make([]float32, len(ids))
		for i := range ones {
			ones[i] = 1
		}
		if n := m.Apply(ids, ones); n != nMask || !slices.Equal(ones, mask) {
			t.Errorf("%v: Apply on ones differs from Mask (%d, %d)", c, n, nMask)
		}

		// Padding weights: zeros stay zero, other weights keep their value
		// unless dropped, and only dropped non-zero weights count.
		w := make([]float32, len(ids))
		want := make([]float32, len(ids))
		wantN := 0
		for i := range w {
			switch i % 5 {
			case 0:
				w[i] = 0
			case 1:
				w[i] = 0.5
			default:
				w[i] = 1
			}
			want[i] = w[i] * mask[i]
			if mask[i] == 0 && w[i] != 0 {
				wantN++
			}
		}
		if n := m.Apply(ids, w); n != wantN || !slices.Equal(w, want) {
			t.Errorf("%v: Apply dropped %d (want %d)\n got %v\nwant %v", c, n, wantN, w, want)
		}
		// Applying twice drops nothing more.
		if n := m.Apply(ids, w); n != 0 || !slices.Equal(w, want) {
			t.Errorf("%v: second Apply dropped %d", c, n)
		}
	}
}

func TestDrops(t *testing.T) {
	ids := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18}
	for _, c := range []Config{{Strategy: Static, K: 4, Start: 1}, {Strategy: HashTable, K: 2, H: 2}, {Strategy: HashAvalanche, K: 3, H: 1}} {
		m := mustNew(t, c)
		for _, asTargets := range []bool{false, true} {
			// The mask of the targets, ids[1:] or ids, aligned to ids.
			tg := ids[1:]
			if asTargets {
				tg = ids
			}
			w := make([]float32, len(tg))
			wantDropped := m.Mask(tg, w)
			want := make([]bool, len(ids))
			for i, v := range w {
				want[len(ids)-len(tg)+i] = v == 0
			}
			drop, targets, dropped := m.Drops(ids, asTargets)
			if !slices.Equal(drop, want) || targets != len(tg) || dropped != wantDropped {
				t.Errorf("%v as targets %v: %v, %d, %d; want %v, %d, %d", c, asTargets, drop, targets, dropped, want, len(tg), wantDropped)
			}
		}
	}
	// Static k=4 start=1 drops targets 1 and 5: ids[2] and ids[6], or, as
	// targets, ids[1] and ids[5].
	m := mustNew(t, Config{Strategy: Static, K: 4, Start: 1})
	if drop, _, _ := m.Drops(ids, false); !drop[2] || !drop[6] || drop[0] {
		t.Errorf("static: %v", drop)
	}
	if drop, _, _ := m.Drops(ids, true); !drop[1] || !drop[5] {
		t.Errorf("static as targets: %v", drop)
	}
	// No targets.
	for _, short := range [][]int32{nil, {42}} {
		drop, targets, dropped := m.Drops(short, false)
		if len(drop) != len(short) || targets != 0 || dropped != 0 || slices.Contains(drop, true) {
			t.Errorf("Drops(%v) = %v, %d, %d", short, drop, targets, dropped)
		}
	}
}

func TestLengthMismatchPanics(t *testing.T) {
	m := mustNew(t, Config{Strategy: HashAvalanche, K: 4, H: 2})
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), "3 weights for 4 targets") {
			t.Errorf("recover() = %v", r)
		}
	}()
	m.Mask([]int32{1, 2, 3, 4}, make([]float32, 3))
}

// TestConcurrent: a Masker is shared by goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	m := mustNew(t, Config{Strategy: HashTable, K: 4, H: 13})
	ids := make([]int32, 4096)
	for i := range ids {
		ids[i] = int32(i * 31 % 5000)
	}
	want, _ := maskString(m, ids)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if got, _ := maskString(m, ids); got != want {
				t.Error("concurrent masks differ")
			}
		})
	}
	wg.Wait()
}

func llama3(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	js, err := assets.Read(assets.Llama3Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := assets.Read(assets.Llama3TokenizerConfig)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Parse(assets.Llama3Tokenizer, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// austen returns the targets of every step-th paragraph of the embedded
// Austen corpus, encoded with Llama 3's tokenizer and its BOS token.
func austen(t testing.TB, step int) [][]int32 {
	t.Helper()
	tok := llama3(t)
	raw, err := assets.Read(assets.Austen)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<24)
	for n := 0; sc.Scan(); n++ {
		if n%step != 0 {
			continue
		}
		var rec struct{ Text string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, rec.Text)
	}
	var out [][]int32
	for _, ids := range tok.EncodeBatch(texts, tokenizer.EncodeOptions{AddSpecial: true}, 0) {
		out = append(out, ids[1:])
	}
	return out
}

// TestDropRateOnText: on real text the hash strategies drop 1/k of the
// targets, within two percentage points.
func TestDropRateOnText(t *testing.T) {
	docs := austen(t, 20)
	total := 0
	for _, d := range docs {
		total += len(d)
	}
	if len(docs) < 200 || total < 20000 {
		t.Fatalf("%d paragraphs, %d targets", len(docs), total)
	}
	for _, s := range []Strategy{HashTable, HashAvalanche} {
		for _, k := range []int{2, 3, 4, 8} {
			for _, h := range []int{4, 13} {
				c := Config{Strategy: s, K: k, H: h}
				m := mustNew(t, c)
				dropped, eligible := 0, 0
				for _, d := range docs {
					dropped += m.Mask(d, make([]float32, len(d)))
					eligible += max(0, len(d)-(h-1))
				}
				rate := float64(dropped) / float64(eligible)
				if err := numtest.Scalar(rate, 1/float64(k), numtest.Tol{Abs: 0.02}); err != nil {
					t.Errorf("%v: drop rate on %d targets against 1/k: %v", c, eligible, err)
				} else {
					t.Logf("%v: drop rate %.4f (1/k = %.4f) on %d targets", c, rate, 1/float64(k), eligible)
				}
			}
		}
	}
}

func TestDropRule(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Strategy: HashTable, K: 4, H: 13}, "about 1 in 4 of the targets whose 13-token context is complete; a sequence's first 12 are kept"},
		{Config{Strategy: HashAvalanche, K: 3, H: 1}, "about 1 in 3 of the targets"},
		{Config{Strategy: Static, K: 2, Start: 5}, "every 2nd target from position 5 on"},
		{Config{Strategy: Static, K: 11}, "every 11th target from position 0 on"},
		{Config{Strategy: Static, K: 23}, "every 23rd target from position 0 on"},
	} {
		if got := c.cfg.DropRule(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.cfg, got, c.want)
		}
	}
}
