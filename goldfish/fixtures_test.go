package goldfish

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// The fixtures are written by scripts/fixtures/make_goldfish_fixtures.py from
// the reference implementation run by PyTorch.

type tableFixture struct {
	Size        int       `json:"size"`
	Seed        uint32    `json:"seed"`
	First       []float64 `json:"first"`
	SpreadIndex []int     `json:"spread_index"`
	Spread      []float64 `json:"spread"`
	Last        []float64 `json:"last"`
	Sum         float64   `json:"sum"`
	SumUnits    int64     `json:"sum_units"`
	SHA256      string    `json:"sha256"`
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// f32 converts a fixture value, which must be a float32 exactly.
func f32(t *testing.T, v float64) float32 {
	t.Helper()
	if float64(float32(v)) != v {
		t.Fatalf("fixture value %v is not a float32", v)
	}
	return float32(v)
}

func TestTableMatchesTorch(t *testing.T) {
	var fx tableFixture
	readJSON(t, "torch_rand_table.json", &fx)
	if fx.Size != TableSize || fx.Seed != TableSeed {
		t.Fatalf("fixture size %d seed %d, want %d %d", fx.Size, fx.Seed, TableSize, TableSeed)
	}
	tab := Table()
	if len(tab) != TableSize {
		t.Fatalf("len(Table()) = %d", len(tab))
	}
	check := func(j int, want float64) {
		t.Helper()
		if w := f32(t, want); math.Float32bits(tab[j]) != math.Float32bits(w) {
			t.Errorf("table[%d] = %v (%#08x), torch %v (%#08x)", j, tab[j], math.Float32bits(tab[j]), w, math.Float32bits(w))
		}
	}
	for j, v := range fx.First {
		check(j, v)
	}
	for i, j := range fx.SpreadIndex {
		check(j, fx.Spread[i])
	}
	for i, v := range fx.Last {
		check(TableSize-len(fx.Last)+i, v)
	}
	if len(fx.First) != 1000 || len(fx.Spread) != 50 || len(fx.Last) != 10 {
		t.Errorf("fixture has %d/%d/%d entries", len(fx.First), len(fx.Spread), len(fx.Last))
	}

	// Every entry is a multiple of 2⁻²⁴ below 1: the float64 sum is exact in
	// any order, and so is the sum in units.
	var sum float64
	var units int64
	raw := make([]byte, 4*len(tab))
	for j, v := range tab {
		sum += float64(v)
		units += int64(v * (1 << 24))
		binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(v))
	}
	if sum != fx.Sum || units != fx.SumUnits {
		t.Errorf("sum %v (%d units), torch %v (%d units)", sum, units, fx.Sum, fx.SumUnits)
	}
	h := sha256.Sum256(raw)
	if got := hex.EncodeToString(h[:]); got != fx.SHA256 {
		t.Errorf("sha256 of the table %s, torch %s", got, fx.SHA256)
	}
}

// TestDropTable checks the Masker's bits against the float32 comparison of
// the table with 1/k that the reference makes, for many k.
func TestDropTable(t *testing.T) {
	tab := Table()
	for _, k := range []int{2, 3, 4, 5, 7, 8, 13, 100, 1 << 20, 3<<20 + 1, 1 << 24, 1<<24 + 1, 1 << 30} {
		thr := float32(1 / float64(k))
		bits := dropTable(thr)
		n := 0
		for j, v := range tab {
			want := v < thr
			if got := bits[j>>6]>>(j&63)&1 != 0; got != want {
				t.Fatalf("k=%d: entry %d (%v): dropped %v, want %v", k, j, v, got, want)
			}
			if want {
				n++
			}
		}
		if k <= 100 {
			if err := numtest.Scalar(float64(n)/TableSize, 1/float64(k), numtest.Tol{Abs: 0.003}); err != nil {
				t.Errorf("k=%d: the fraction of the table below 1/k: %v", k, err)
			}
		}
	}
}

type maskConfig struct {
	Strategy string `json:"strategy"`
	K        int    `json:"k"`
	H        int    `json:"h"`
	Start    int    `json:"start"`
}

type maskHeader struct {
	Configs   []maskConfig        `json:"configs"`
	Sequences int                 `json:"sequences"`
	Bands     map[string][2]int64 `json:"avalanche_float32_bands"`
}

type maskRecord struct {
	IDs  []int32  `json:"ids"`
	Drop []string `json:"drop"`
}

func readMasks(t *testing.T) (maskHeader, []maskRecord) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "masks.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	var hdr maskHeader
	var recs []maskRecord
	for n := 1; sc.Scan(); n++ {
		if n == 1 {
			if err := json.Unmarshal(sc.Bytes(), &hdr); err != nil {
				t.Fatalf("masks.jsonl.gz:1: %v", err)
			}
			continue
		}
		var r maskRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("masks.jsonl.gz:%d: %v", n, err)
		}
		if len(r.Drop) != len(hdr.Configs) {
			t.Fatalf("masks.jsonl.gz:%d: %d masks for %d configurations", n, len(r.Drop), len(hdr.Configs))
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(recs) != hdr.Sequences || len(recs) < 1000 {
		t.Fatalf("%d sequences, header says %d", len(recs), hdr.Sequences)
	}
	return hdr, recs
}

func TestMasksMatchTorch(t *testing.T) {
	hdr, recs := readMasks(t)
	for ci, fc := range hdr.Configs {
		s, err := ParseStrategy(fc.Strategy)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Strategy: s, K: fc.K, H: fc.H, Start: fc.Start}
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		drops, targets := 0, 0
		for ri, r := range recs {
			want := r.Drop[ci]
			if len(want) != len(r.IDs) {
				t.Fatalf("sequence %d: mask of %d for %d ids", ri, len(want), len(r.IDs))
			}
			w := make([]float32, len(r.IDs))
			n := m.Mask(r.IDs, w)
			got := make([]byte, len(w))
			count := 0
			for i, v := range w {
				got[i] = '0'
				if v == 0 {
					got[i] = '1'
					count++
				} else if v != 1 {
					t.Fatalf("%v: weight %v", cfg, v)
				}
			}
			if string(got) != want {
				t.Errorf("%v, sequence %d %v:\n got %s\nwant %s", cfg, ri, r.IDs, got, want)
				continue
			}
			if n != count {
				t.Errorf("%v, sequence %d: Mask returned %d, dropped %d", cfg, ri, n, count)
			}
			drops += count
			targets += len(w)
		}
		t.Logf("%-28v %5d of %d targets dropped (%.3f)", cfg, drops, targets, float64(drops)/float64(targets))
	}
}

// TestAvalancheFloat32Edges checks the fixtures' edge sequence: ids whose
// hash falls where float32 and float64 comparisons with (2³²−1)/k differ are
// kept, as PyTorch keeps them.
func TestAvalancheFloat32Edges(t *testing.T) {
	hdr, recs := readMasks(t)
	if len(hdr.Bands) != 4 {
		t.Fatalf("bands %v", hdr.Bands)
	}
	for ks, band := range hdr.Bands {
		k, err := strconv.Atoi(ks)
		if err != nil {
			t.Fatal(err)
		}
		thr := float64(math.MaxUint32) / float64(k)
		lo, hi := band[0], band[1]
		if !(float64(lo) < thr && float64(hi) < thr) || float32(lo) < float32(thr) {
			t.Errorf("k=%d: band %v is not where float32 and float64 differ", k, band)
		}
		if cut := avalancheCut(k); cut != uint64(lo) {
			t.Errorf("k=%d: cut %d, want %d", k, cut, lo)
		}
		// The fixtures hold ids hashing into the band (as contexts of
		// width 1), which TestMasksMatchTorch proves kept.
		found := 0
		for _, r := range recs {
			for _, id := range r.IDs {
				if h := int64(wang32(uint64(int64(id)))); h >= lo && h <= hi {
					found++
				}
			}
		}
		if found == 0 {
			t.Errorf("k=%d: no fixture id hashes into the band %v", k, band)
		}
	}
}

func TestAvalancheThresholdMatchesTorch(t *testing.T) {
	var fx struct {
		Cases []struct {
			K    int    `json:"k"`
			Hash uint64 `json:"hash"`
			Drop bool   `json:"drop"`
		} `json:"cases"`
	}
	readJSON(t, "avalanche_threshold.json", &fx)
	if len(fx.Cases) < 50 {
		t.Fatalf("%d cases", len(fx.Cases))
	}
	for _, c := range fx.Cases {
		if got := c.Hash < avalancheCut(c.K); got != c.Drop {
			t.Errorf("k=%d hash %d: drop %v, torch %v", c.K, c.Hash, got, c.Drop)
		}
	}
}
