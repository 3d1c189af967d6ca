// Package units owns how memtrain writes and reads sizes and counts.
//
// Perplexities, which range from 1 to millions, are written by
// [FormatPerplexity]: "24.81", "7.04e6".
//
// Counts (parameters, FLOPs) use decimal units: [FormatCount] writes them
// the way model cards do, "8.03B", and [ShortCount] with three significant
// digits, "124M", for tables; [Commas] writes them in full, "1,234,567".
//
// Sizes in bytes are written by [FormatBytes] in binary units, "15.0 GiB",
// and read by [ParseBytes]. ParseBytes is the one size grammar of memtrain
// (every flag and file that takes a size uses it):
//
//	size   = number [spaces] [unit]
//	number = digits ["." digits] | "." digits    (decimal; no sign, no exponent)
//	unit   = "B" | prefix | prefix "iB" | prefix "B"
//	prefix = "K" | "M" | "G" | "T" | "P" | "E"
//
// Units are case-insensitive. A bare prefix and the IEC units are powers of
// 1024 (K = KiB = 2^10, M = MiB = 2^20, G = GiB = 2^30, T = TiB = 2^40, …);
// a prefix with a plain B is an SI power of 1000 (KB = 10^3, MB = 10^6,
// GB = 10^9, TB = 10^12, …). No unit, or B, is bytes. So "64K" is 65536,
// "2GiB" is 2147483648 and "5GB" is 5000000000. A fraction is allowed and
// the result is rounded to the nearest byte ("1.5K" is 1536). Sizes above
// 2^62 bytes (4 EiB) are rejected, as are empty strings, signs, NaN and
// infinities. ParseBytes reads back what FormatBytes prints: "15.0 GiB",
// "512 B".
//
// Lists, such as a flag's "2,4,8" or "oar,ors", are read by [SplitList]:
// comma-separated items, spaces around each trimmed, none of them empty
// ("1,,2" and "1,2," are mistakes, not the list 1, 2).
//
// Counts a user gives (a flag, a configuration key) are checked by
// [CheckCount] against a stated range — [MaxCount] where nothing smaller
// applies — before anything is sized or multiplied from them, and their
// products and sums by [MulInt] and [AddInt], which report an overflow
// instead of wrapping.
//
// The package imports nothing of memtrain.
package units

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// MaxBytes is the largest size ParseBytes accepts, 2^62 bytes (4 EiB).
const MaxBytes = 1 << 62

// countUnits are the decimal units of counts, largest first.
var countUnits = []struct {
	div    float64
	suffix string
}{{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}}

// FormatCount writes a count the way model cards do, with two decimals and
// a decimal unit: 8030261248 as "8.03B", 22900000 as "22.90M", 999 as
// "999".
func FormatCount(n int64) string {
	return formatCount(n, func(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }, "K")
}

// ShortCount writes a count with three significant digits and a decimal
// unit, for tables: 124439808 as "124M", 8030261248 as "8.03B", 1500000 as
// "1.5M", 1000 as "1k" (a lower-case k), 999 as "999".
func ShortCount(n int64) string {
	return formatCount(n, func(x float64) string { return strconv.FormatFloat(x, 'g', 3, 64) }, "k")
}

// Commas writes a count in full with its thousands separated by commas:
// 1234567 as "1,234,567", -1000 as "-1,000", 999 as "999".
func Commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	b.Grow(len(s) + len(digits)/3)
	if len(digits) < len(s) {
		b.WriteByte('-')
	}
	for i := 0; i < len(digits); i++ {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(digits[i])
	}
	return b.String()
}

// formatCount writes n in the largest unit it reaches, moving up a unit
// where the mantissa rounds to 1000 ("1.00M", not "1000.00K").
func formatCount(n int64, mantissa func(float64) string, thousand string) string {
	v := float64(n)
	for i, u := range countUnits {
		if math.Abs(v) < u.div {
			continue
		}
		if i > 0 && roundsTo1000(mantissa(v/u.div)) {
			u = countUnits[i-1]
		}
		suffix := u.suffix
		if suffix == "K" {
			suffix = thousand
		}
		return mantissa(v/u.div) + suffix
	}
	return strconv.FormatInt(n, 10)
}

// roundsTo1000 reports whether a written mantissa is 1000 or more.
func roundsTo1000(s string) bool {
	x, err := strconv.ParseFloat(s, 64)
	return err == nil && math.Abs(x) >= 1000
}

// FormatBytes writes a size in binary units with one decimal: 1536 as
// "1.5 KiB", 16106127360 as "15.0 GiB"; below 1 KiB in bytes, "512 B".
// ParseBytes reads it back, to within the rounding of the decimal.
func FormatBytes(n int64) string {
	const unit = 1024
	sign, m := "", uint64(n)
	if n < 0 {
		sign, m = "-", -uint64(n)
	}
	if m < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := uint64(unit), 0
	for q := m / unit; q >= unit; q /= unit {
		div *= unit
		exp++
	}
	s := strconv.FormatFloat(float64(m)/float64(div), 'f', 1, 64)
	if s == "1024.0" && exp < 5 { // 1048575 is "1.0 MiB", not "1024.0 KiB"
		s, exp = "1.0", exp+1
	}
	return fmt.Sprintf("%s%s %ciB", sign, s, "KMGTPE"[exp])
}

// SplitList reads a comma-separated list (see the package documentation):
// its items with the spaces around them trimmed, nil for a blank string,
// and an error for an empty item.
func SplitList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	items := strings.Split(s, ",")
	for i, item := range items {
		if items[i] = strings.TrimSpace(item); items[i] == "" {
			return nil, fmt.Errorf("list %q: item %d of %d is empty", s, i+1, len(items))
		}
	}
	return items, nil
}

// prefixes are the unit prefixes, in order of their powers.
const prefixes = "KMGTPE"

// ParseBytes reads a size in the package's grammar (see the package
// documentation): "4096", "64K", "1.5 MiB", "500MB", "2GiB", "15.0 GiB".
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	whole, frac, dot := strings.Cut(num, ".")
	if num == "" || !allDigits(whole) || !allDigits(frac) || whole == "" && frac == "" || dot && frac == "" {
		return 0, invalid(s)
	}
	mult, ok := unitSize(unit)
	if !ok {
		return 0, invalid(s)
	}
	// The exact value (whole.frac × mult), rounded to the nearest byte,
	// halves up.
	n, _ := new(big.Int).SetString(whole+frac, 10)
	n.Mul(n, new(big.Int).SetUint64(mult))
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil)
	n.Lsh(n, 1).Add(n, den)
	n.Quo(n, den.Lsh(den, 1))
	if n.Cmp(big.NewInt(MaxBytes)) > 0 {
		return 0, fmt.Errorf("units: size %q is too large (at most 4 EiB)", s)
	}
	return n.Int64(), nil
}

// unitSize returns the bytes of an upper-cased unit of the grammar.
func unitSize(unit string) (uint64, bool) {
	if unit == "" || unit == "B" {
		return 1, true
	}
	p := strings.IndexByte(prefixes, unit[0])
	if p < 0 {
		return 0, false
	}
	switch unit[1:] {
	case "", "IB":
		return 1 << (10 * (p + 1)), true
	case "B":
		m := uint64(1)
		for range p + 1 {
			m *= 1000
		}
		return m, true
	}
	return 0, false
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// errInvalid is the cause of every malformed size.
var errInvalid = errors.New("want a size such as 4096, 64K, 500MB or 2GiB")

func invalid(s string) error {
	return fmt.Errorf("units: invalid size %q: %w", s, errInvalid)
}

// ParseInts reads a list of integers in SplitList's grammar, each within
// [lo, hi]: "1,2, 3". An empty list is an error, as is an item out of
// range or not an integer (naming it).
func ParseInts(s string, lo, hi int64) ([]int64, error) {
	items, err := SplitList(s)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("no numbers in %q (want integers, comma-separated)", s)
	}
	out := make([]int64, len(items))
	for i, item := range items {
		n, err := strconv.ParseInt(item, 10, 64)
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q: want an integer in [%d, %d]", item, lo, hi)
		}
		out[i] = n
	}
	return out, nil
}

// FormatPerplexity writes a perplexity for reading: two decimals below
// 1000, else three significant digits and a power of ten ("7.04e6").
func FormatPerplexity(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) < 1000 {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	exp := int(math.Floor(math.Log10(math.Abs(v))))
	m := v / math.Pow(10, float64(exp))
	if math.Abs(m) >= 9.995 { // rounds up to the next power
		m /= 10
		exp++
	}
	return fmt.Sprintf("%.2fe%d", m, exp)
}

// MaxCount is the largest count a user may give (a flag or a key: steps,
// iterations, documents, resamples) where no smaller bound of its own
// applies: 10⁹, far beyond any run, and small enough that a product of
// such a count and another one in range does not overflow an int64.
const MaxCount = 1_000_000_000

// MulInt is a·b for counts (a, b ≥ 0), and false when the product
// overflows an int64 (or either is negative): the product of two counts a
// user gives, such as epochs × steps a epoch, checked before it is used.
func MulInt(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	if a != 0 && b > math.MaxInt64/a {
		return 0, false
	}
	return a * b, true
}

// AddInt is a+b for counts (a, b ≥ 0), and false when the sum overflows
// an int64 (or either is negative).
func AddInt(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return 0, false
	}
	return a + b, true
}
