package goldfish

import (
	"fmt"
	"math"
	"strconv"
)

// Strategy chooses which targets the goldfish loss drops.
type Strategy int

// The strategies. The zero Strategy is none of them and fails validation.
const (
	// Static drops every K-th target from position Start on.
	Static Strategy = iota + 1
	// HashTable drops a target when the table entry of its H-token
	// context's product is below 1/K.
	HashTable
	// HashAvalanche drops a target when Thomas Wang's hash of its H-token
	// context's product is below (2³²−1)/K.
	HashAvalanche
)

var strategyNames = [...]string{Static: "static", HashTable: "hash-table", HashAvalanche: "hash-avalanche"}

// String returns the strategy's name as ParseStrategy accepts it, or
// "Strategy(n)" for an invalid one.
func (s Strategy) String() string {
	if s.valid() {
		return strategyNames[s]
	}
	return "Strategy(" + strconv.Itoa(int(s)) + ")"
}

func (s Strategy) valid() bool { return s >= Static && s <= HashAvalanche }

// IsHash reports whether s decides from the tokens' context (HashTable and
// HashAvalanche) rather than from positions.
func (s Strategy) IsHash() bool { return s == HashTable || s == HashAvalanche }

// ParseStrategy returns the strategy named "static", "hash-table" or
// "hash-avalanche", the reference's names.
func ParseStrategy(name string) (Strategy, error) {
	for s, n := range strategyNames {
		if n != "" && n == name {
			return Strategy(s), nil
		}
	}
	return 0, fmt.Errorf("goldfish: unknown strategy %q (want static, hash-table or hash-avalanche)", name)
}

// MarshalText implements encoding.TextMarshaler with the strategy's name.
func (s Strategy) MarshalText() ([]byte, error) {
	if !s.valid() {
		return nil, fmt.Errorf("goldfish: invalid strategy %d", int(s))
	}
	return []byte(strategyNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseStrategy.
func (s *Strategy) UnmarshalText(b []byte) error {
	v, err := ParseStrategy(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Config configures a Masker.
type Config struct {
	// Strategy chooses the targets to drop.
	Strategy Strategy `json:"strategy" default:"hash-table" resume:"same" help:"goldfish strategy: static, hash-table or hash-avalanche"`

	// K sets the fraction dropped, 1/K (on average for the hash
	// strategies). It must be at least 2.
	K int `json:"k" default:"4" resume:"same" help:"goldfish: drop one target in k (k ≥ 2)"`

	// H is the context width of the hash strategies: a target is dropped or
	// kept according to the H targets ending at it, itself included. It
	// must be at least 1; the published runs use 13. Static ignores it.
	H int `json:"h,omitempty" default:"13" resume:"same" help:"goldfish: context width of the hash strategies"`

	// Start is the first position that Static drops (the reference's
	// goldfish_start_position). It must be at least 0. The hash strategies
	// ignore it.
	Start int `json:"start,omitempty" resume:"same" help:"goldfish: first dropped position of the static strategy"`
}

// Validate reports the first problem of c, or nil.
func (c Config) Validate() error {
	if !c.Strategy.valid() {
		return fmt.Errorf("goldfish: unknown strategy %d (want Static, HashTable or HashAvalanche)", int(c.Strategy))
	}
	if c.K < 2 {
		return fmt.Errorf("goldfish: k must be ≥ 2, got %d", c.K)
	}
	if c.Strategy.IsHash() && c.H < 1 {
		return fmt.Errorf("goldfish: h (the context width) must be ≥ 1 for the %s strategy, got %d", c.Strategy, c.H)
	}
	if c.Strategy == Static && c.Start < 0 {
		return fmt.Errorf("goldfish: start must be ≥ 0, got %d", c.Start)
	}
	return nil
}

// String describes c as "hash-table k=4 h=13" or "static k=4 start=0".
func (c Config) String() string {
	if c.Strategy == Static {
		return fmt.Sprintf("%s k=%d start=%d", c.Strategy, c.K, c.Start)
	}
	return fmt.Sprintf("%s k=%d h=%d", c.Strategy, c.K, c.H)
}

// A Masker computes the goldfish mask of one configuration. It is immutable
// and safe for concurrent use.
type Masker struct {
	cfg Config

	// HashTable: bit j is set when table entry j is below 1/K.
	table []uint64
	// HashAvalanche: a hash h is dropped when h < cut, which is exactly
	// when float32(h) < float32((2³²−1)/K).
	cut uint64
}

// New returns a Masker for c, or c's validation error. For HashTable it
// draws the table, which takes a few milliseconds: share one Masker rather
// than making one per sequence.
func New(c Config) (*Masker, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &Masker{cfg: c}
	switch c.Strategy {
	case HashTable:
		// Python's 1 / k, then float32 as PyTorch compares a float32
		// tensor with a Python float.
		m.table = dropTable(float32(1 / float64(c.K)))
	case HashAvalanche:
		m.cut = avalancheCut(c.K)
	}
	return m, nil
}

// avalancheCut returns the least h with float32(h) ≥ float32((2³²−1)/k):
// float32 rounding is monotonic, so the hashes below the threshold in
// float32 are exactly those below the cut.
func avalancheCut(k int) uint64 {
	thr := float32(float64(math.MaxUint32) / float64(k))
	lo, hi := uint64(0), uint64(1)<<32
	for lo < hi {
		mid := lo + (hi-lo)/2
		if float32(mid) >= thr {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// Config returns the Masker's configuration.
func (m *Masker) Config() Config { return m.cfg }

// Mask writes the keep weights of the targets of one sequence into w: 1 for
// a kept target, 0 for a dropped one. It returns the number dropped. Static
// counts positions from targets[0]; the hash strategies never drop the first
// H−1 targets. Mask panics if len(w) != len(targets).
//
// Padding or ignore-index targets take part in the contexts as they are, as
// in the reference; use Apply with the padding's weights to keep them at 0.
func (m *Masker) Mask(targets []int32, w []float32) int {
	return m.mask(targets, w, false)
}

// Apply drops targets from existing weights, such as 0/1 padding weights:
// the weights of dropped targets become 0 and the others are left as they
// are, so that weights already 0 stay 0. It returns the number of targets it
// dropped among those whose weight was not 0. On weights of 1, Apply and
// Mask agree. Apply panics if len(w) != len(targets).
func (m *Masker) Apply(targets []int32, w []float32) int {
	return m.mask(targets, w, true)
}

// DropRule says which targets the configuration drops, and so why a
// measured fraction falls short of 1/K: the hash strategies drop about one
// in K of the targets whose H-token context is complete, and keep a
// sequence's first H−1; Static drops every K-th from Start.
func (c Config) DropRule() string {
	if c.Strategy == Static {
		return fmt.Sprintf("every %s target from position %d on", ordinal(c.K), c.Start)
	}
	if c.H == 1 {
		return fmt.Sprintf("about 1 in %d of the targets", c.K)
	}
	return fmt.Sprintf("about 1 in %d of the targets whose %d-token context is complete; a sequence's first %d are kept", c.K, c.H, c.H-1)
}

// ordinal writes n as "4th", "2nd", "3rd", "11th".
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// Drops reports which tokens of a sequence of ids the loss drops: drop[i]
// is set when the loss at ids[i] is dropped. The targets are ids[1:], so
// drop[0] is never set; with asTargets they are ids itself (labels), and
// every position may be dropped. It returns drop (len(ids) long), the
// number of targets and the number of them dropped.
func (m *Masker) Drops(ids []int32, asTargets bool) (drop []bool, targets, dropped int) {
	t := ids
	if !asTargets && len(t) > 0 {
		t = ids[1:]
	}
	w := make([]float32, len(t))
	dropped = m.Mask(t, w)
	drop = make([]bool, len(ids))
	for i, v := range w {
		drop[len(ids)-len(t)+i] = v == 0
	}
	return drop, len(t), dropped
}

func (m *Masker) mask(t []int32, w []float32, apply bool) int {
	if len(w) != len(t) {
		panic(fmt.Sprintf("goldfish: %d weights for %d targets", len(w), len(t)))
	}
	if m.cfg.K == 0 {
		panic("goldfish: a Masker must be made by New")
	}
	if m.cfg.Strategy == Static {
		return m.static(w, apply)
	}
	h := m.cfg.H
	if !apply {
		for i := range min(h-1, len(w)) {
			w[i] = 1
		}
	}
	if h > len(t) {
		return 0
	}
	w = w[:len(t)]

	// The context product of target i, t[i-h+1]·…·t[i], is computed in
	// O(1) per target (van Herk/Gil-Werman): t is cut into blocks of h;
	// the context of i, in the block starting at b, is the suffix of the
	// previous block from i-h+1, suf[i-b+1], times the prefix of its own,
	// p. Products wrap modulo 2⁶⁴, in any order alike.
	var buf [65]int64
	suf := buf[:]
	if h+1 > len(buf) {
		suf = make([]int64, h+1)
	}
	suf = suf[:h+1]
	suf[h] = 1 // block 0 has no previous block
	p, b := int64(1), 0
	dropped := 0
	table, cut := m.table, m.cut
	for i, x := range t {
		if i == b+h {
			// Target i starts a block: the suffixes of the one before.
			s := int64(1)
			for o := h - 1; o >= 1; o-- {
				s *= int64(t[b+o])
				suf[o] = s
			}
			p, b = 1, i
		}
		p *= int64(x)
		if i < h-1 {
			continue
		}
		key := suf[i-b+1] * p
		// d is 1 to drop target i, 0 to keep it; no branch on it.
		var d uint32
		if table != nil {
			j := key % TableSize // Go's % truncates; Python's floors
			if j < 0 {
				j += TableSize
			}
			d = uint32(table[j>>6]>>(j&63)) & 1
		} else {
			d = uint32((uint64(wang32(uint64(key))) - cut) >> 63)
		}
		if !apply {
			w[i] = float32(1 - d)
			dropped += int(d)
		} else {
			bits := math.Float32bits(w[i])
			dropped += int(d & nonzero(bits))
			w[i] = math.Float32frombits(bits & (d - 1))
		}
	}
	return dropped
}

// nonzero returns 1 if the float32 with the given bits is not ±0, else 0.
func nonzero(bits uint32) uint32 {
	return uint32(-uint64(bits&0x7fffffff)>>63) & 1
}

func (m *Masker) static(w []float32, apply bool) int {
	if !apply {
		for i := range w {
			w[i] = 1
		}
	}
	dropped := 0
	k := m.cfg.K
	for i := m.cfg.Start; i < len(w); {
		if !apply || w[i] != 0 {
			dropped++
		}
		w[i] = 0
		if k >= len(w)-i {
			break
		}
		i += k
	}
	return dropped
}

// wang32 is lit_gpt's hashint(key, width=32): Thomas Wang's 64-bit integer
// mix in uint64 arithmetic, masked to 32 bits after steps 1, 4, 7 and 10.
func wang32(key uint64) uint32 {
	const mask = 1<<32 - 1
	key = (^key + key<<21) & mask // 1
	key = key<<21 - key - 1       // 2
	key ^= key >> 24              // 3
	key = (key + key<<3 + key<<8) & mask
	key *= 265
	key ^= key >> 14
	key = (key + key<<2 + key<<4) & mask // 7
	key *= 21
	key ^= key >> 28
	key = (key + key<<31) & mask // 10
	return uint32(key)
}
