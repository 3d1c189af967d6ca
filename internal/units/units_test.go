package units

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestFormatCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {999, "999"}, {1000, "1.00K"}, {1536, "1.54K"}, {22_900_000, "22.90M"},
		{8_030_261_248, "8.03B"}, {405_000_000_000, "405.00B"}, {2_500_000_000_000, "2.50T"},
		{999_999, "1.00M"}, {999_994_999, "999.99M"}, {999_995_000, "1.00B"}, {-5_000, "-5.00K"},
	} {
		if got := FormatCount(c.n); got != c.want {
			t.Errorf("FormatCount(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestShortCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {999, "999"}, {1000, "1k"}, {1_500_000, "1.5M"}, {124_439_808, "124M"},
		{8_030_261_248, "8.03B"}, {70_553_706_496, "70.6B"}, {999_600, "1M"}, {999_499, "999k"},
		{1_234_567_890_123, "1.23T"}, {-1_500, "-1.5k"},
	} {
		if got := ShortCount(c.n); got != c.want {
			t.Errorf("ShortCount(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestCommas(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {7, "7"}, {999, "999"}, {1000, "1,000"}, {12345, "12,345"}, {123456, "123,456"},
		{1234567, "1,234,567"}, {-1, "-1"}, {-999, "-999"}, {-1000, "-1,000"}, {-1234567, "-1,234,567"},
		{math.MaxInt64, "9,223,372,036,854,775,807"}, {math.MinInt64, "-9,223,372,036,854,775,808"},
	} {
		if got := Commas(c.n); got != c.want {
			t.Errorf("Commas(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {512, "512 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"},
		{1<<20 - 1, "1.0 MiB"}, {80e9, "74.5 GiB"}, {15 << 30, "15.0 GiB"}, {3 << 40, "3.0 TiB"},
		{1 << 62, "4.0 EiB"}, {math.MaxInt64, "8.0 EiB"}, {-1536, "-1.5 KiB"}, {-5, "-5 B"},
		{math.MinInt64, "-8.0 EiB"},
	} {
		if got := FormatBytes(c.n); got != c.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		s    string
		want int64
	}{
		{"0", 0}, {"123", 123}, {"4096", 4096}, {" 4096 ", 4096}, {"512 B", 512}, {"512b", 512},
		// A bare prefix and the IEC units are powers of 1024.
		{"64K", 64 << 10}, {"64k", 64 << 10}, {"16M", 16 << 20}, {"1G", 1 << 30}, {"4T", 4 << 40},
		{"1P", 1 << 50}, {"2E", 2 << 60}, {"4E", 1 << 62},
		{"1KiB", 1 << 10}, {"2GiB", 2 << 30}, {"2 gib", 2 << 30}, {"3TiB", 3 << 40}, {"1 PiB", 1 << 50},
		// A prefix with a plain B is an SI power of 1000.
		{"1KB", 1e3}, {"500MB", 500e6}, {"5GB", 5e9}, {"5 GB", 5e9}, {"2TB", 2e12}, {"1PB", 1e15}, {"4EB", 4e18},
		// Fractions, rounded to the nearest byte, halves up.
		{"1.5K", 1536}, {"0.5", 1}, {"0.49", 0}, {".5K", 512}, {"1.0009765625K", 1025}, {"2.5 B", 3},
		{"0.000000000000000001E", 1}, {"0.000000000000000000001E", 0}, {"00012", 12},
		// What FormatBytes prints.
		{"15.0 GiB", 15 << 30}, {"1.5 KiB", 1536}, {"74.5 GiB", 79993765888}, {"4.0 EiB", 1 << 62},
	} {
		got, err := ParseBytes(c.s)
		if err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.s, got, err, c.want)
		}
	}
}

func TestParseBytesErrors(t *testing.T) {
	for _, s := range []string{
		"", " ", "B", "K", "GiB", ".", "5.", "-4", "-4K", "+4", "NaN", "nan", "Inf", "-Inf", "1e3", "1E3B",
		"0x10", "1_000", "1,000", "1.2.3", "3K7", "5 G B", "5KiiB", "5Ki", "5 bytes", "5Q", "5ZiB", "5 MiB extra",
	} {
		if n, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) = %d, no error", s, n)
		} else if !errors.Is(err, errInvalid) || !strings.HasPrefix(err.Error(), "units: ") || !strings.Contains(err.Error(), `"`+s+`"`) {
			t.Errorf("ParseBytes(%q): %v, want an invalid-size error naming it", s, err)
		}
	}
	for _, s := range []string{"4611686018427387905", "4.0000000001E", "5E", "4611686.018427387905TB", "8EiB", "99999999999999999999999999"} {
		if n, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) = %d, no error", s, n)
		} else if !strings.Contains(err.Error(), "too large") {
			t.Errorf("ParseBytes(%q): %v, want too large", s, err)
		}
	}
	if n, err := ParseBytes("4611686018427387904"); err != nil || n != MaxBytes {
		t.Errorf("ParseBytes(2^62) = %d, %v", n, err)
	}
}

// TestBytesRoundTrip checks that what FormatBytes prints reads back to
// within its rounding.
func TestBytesRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 1023, 1024, 1025, 1<<20 - 1, 1 << 20, 5e9, 15 << 30, 1<<62 - 1, 1 << 62} {
		checkRoundTrip(t, n)
	}
	for n := int64(1); n < MaxBytes/3; n = n*3 + 1 {
		checkRoundTrip(t, n)
	}
}

// checkRoundTrip checks that FormatBytes(n) parses back to n, to within
// the rounding of its one decimal: 0.05 of the unit, and the unit is at
// most n (a little more where 1023.95 KiB is written 1.0 MiB).
func checkRoundTrip(t *testing.T, n int64) {
	t.Helper()
	s := FormatBytes(n)
	m, err := ParseBytes(s)
	if err != nil {
		t.Fatalf("ParseBytes(FormatBytes(%d) = %q): %v", n, s, err)
	}
	tol := int64(0)
	if n >= 1024 {
		tol = n/19 + 1
	}
	if d := m - n; d > tol || d < -tol {
		t.Errorf("FormatBytes(%d) = %q reads back as %d", n, s, m)
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"0", "4096", "64K", "1.5 MiB", "500MB", "5GB", "2GiB", "15.0 GiB", "4E", "4.0000001E", "-1", "NaN", ".5", "1e3", "  7 kb "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "units: ") {
				t.Errorf("ParseBytes(%q): %v, want a units: error", s, err)
			}
			return
		}
		if n < 0 || n > MaxBytes {
			t.Fatalf("ParseBytes(%q) = %d, outside [0, 2^62]", s, n)
		}
		checkRoundTrip(t, n)
	})
}

func TestSplitList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // the items joined by |, or the error
	}{
		{"2,4,8", "2|4|8"},
		{" oar , ors ", "oar|ors"},
		{"one", "one"},
		{"", ""},
		{"  ", ""},
		{"1,,2", `list "1,,2": item 2 of 3 is empty`},
		{"1,2,", `list "1,2,": item 3 of 3 is empty`},
		{",1", `list ",1": item 1 of 2 is empty`},
		{"1, ,2", `list "1, ,2": item 2 of 3 is empty`},
		{",", `list ",": item 1 of 2 is empty`},
	} {
		items, err := SplitList(tc.in)
		got := strings.Join(items, "|")
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("SplitList(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseInts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int64
		err  string
	}{
		{"1,2, 3", []int64{1, 2, 3}, ""},
		{"-4", []int64{-4}, ""},
		{"", nil, "no numbers"},
		{"1,,2", nil, "empty"},
		{"1,x", nil, `"x": want an integer in [-10, 10]`},
		{"11", nil, `"11": want an integer in [-10, 10]`},
		{"1.5", nil, `"1.5": want an integer`},
	} {
		got, err := ParseInts(tc.in, -10, 10)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseInts(%q): %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ParseInts(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestFormatPerplexity(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{1.5, "1.50"},
		{999.994, "999.99"},
		{1000, "1.00e3"},
		{7039909.85, "7.04e6"},
		{9999.7, "1.00e4"},
		{math.Inf(1), "+Inf"},
	} {
		if got := FormatPerplexity(c.v); got != c.want {
			t.Errorf("FormatPerplexity(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestMulAddInt(t *testing.T) {
	for _, c := range []struct {
		a, b, want int64
		ok         bool
	}{
		{3, 4, 12, true}, {0, math.MaxInt64, 0, true}, {math.MaxInt64, 1, math.MaxInt64, true},
		{4611686018427387905, 4, 0, false}, {math.MaxInt64, 2, 0, false}, {-1, 2, 0, false},
		{1 << 32, 1 << 31, 0, false},
	} {
		got, ok := MulInt(c.a, c.b)
		if ok != c.ok || ok && got != c.want {
			t.Errorf("MulInt(%d, %d) = %d, %v; want %d, %v", c.a, c.b, got, ok, c.want, c.ok)
		}
	}
	if s, ok := AddInt(math.MaxInt64-1, 1); !ok || s != math.MaxInt64 {
		t.Errorf("AddInt(max-1, 1) = %d, %v", s, ok)
	}
	if _, ok := AddInt(math.MaxInt64, 1); ok {
		t.Error("AddInt(max, 1) did not overflow")
	}
	if _, ok := AddInt(-1, 1); ok {
		t.Error("AddInt(-1, 1) took a negative count")
	}
}
