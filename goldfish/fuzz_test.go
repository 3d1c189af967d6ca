package goldfish

import (
	"encoding/binary"
	"math"
	"testing"
)

// naiveDrops is the definition, written directly: h multiplications per
// target, the float table compared in float32, the hash converted to
// float32.
func naiveDrops(c Config, tab []float32, t []int32) []bool {
	d := make([]bool, len(t))
	switch c.Strategy {
	case Static:
		for i := c.Start; i < len(t); i += c.K {
			d[i] = true
		}
	case HashTable, HashAvalanche:
		for i := c.H - 1; i < len(t); i++ {
			key := int64(1)
			for _, x := range t[i-c.H+1 : i+1] {
				key *= int64(x)
			}
			if c.Strategy == HashTable {
				j := ((key % TableSize) + TableSize) % TableSize
				d[i] = tab[j] < float32(1/float64(c.K))
			} else {
				d[i] = float32(wang32(uint64(key))) < float32(float64(math.MaxUint32)/float64(c.K))
			}
		}
	}
	return d
}

// FuzzMask: Mask never panics, writes only 0 and 1, agrees with the naive
// definition and with Apply on weights of 1, and Apply never revives a zero
// weight.
func FuzzMask(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}, uint8(1), uint16(2), uint8(2), uint16(0))
	f.Add([]byte("the same document, the same document, the same document"), uint8(0), uint16(4), uint8(3), uint16(1))
	f.Add(make([]byte, 400), uint8(2), uint16(0), uint8(12), uint16(3))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0x80, 0, 0, 0, 0x80}, uint8(2), uint16(6), uint8(0), uint16(9))
	f.Add(make([]byte, 1200), uint8(1), uint16(1), uint8(69), uint16(0))

	tab := Table()
	// Drawing a table costs milliseconds: keep one per k (125 KB each).
	tables := map[int][]uint64{}
	f.Fuzz(func(t *testing.T, data []byte, s uint8, k uint16, h uint8, start uint16) {
		c := Config{
			Strategy: Strategy(1 + int(s)%3),
			K:        2 + int(k)%30,
			H:        1 + int(h)%70, // beyond the 64-entry stack buffer too
			Start:    int(start) % 300,
		}
		if k >= 60000 {
			c.K = math.MaxInt - int(k)
		}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		m := &Masker{cfg: c, cut: avalancheCut(c.K)}
		if c.Strategy == HashTable {
			if tables[c.K] == nil {
				tables[c.K] = dropTable(float32(1 / float64(c.K)))
			}
			m.table = tables[c.K]
		}
		ids := make([]int32, len(data)/4)
		for i := range ids {
			ids[i] = int32(binary.LittleEndian.Uint32(data[4*i:]))
			if data[4*i]&0xC0 == 0 { // mostly small ids, as text has
				ids[i] &= 0x1FFFF
			}
		}

		w := make([]float32, len(ids))
		for i := range w {
			w[i] = -3 // Mask must overwrite every weight
		}
		n := m.Mask(ids, w)
		want := naiveDrops(c, tab, ids)
		count := 0
		for i, v := range w {
			if v != 0 && v != 1 {
				t.Fatalf("%v: weight %d = %v", c, i, v)
			}
			if (v == 0) != want[i] {
				t.Fatalf("%v: target %d dropped %v, want %v (ids %v)", c, i, v == 0, want[i], ids)
			}
			if v == 0 {
				count++
			}
		}
		if n != count {
			t.Fatalf("%v: Mask returned %d, dropped %d", c, n, count)
		}

		ones := make([]float32, len(ids))
		for i := range ones {
			ones[i] = 1
		}
		if n2 := m.Apply(ids, ones); n2 != n {
			t.Fatalf("%v: Apply on ones dropped %d, Mask %d", c, n2, n)
		}
		for i := range ones {
			if ones[i] != w[i] {
				t.Fatalf("%v: Apply on ones differs from Mask at %d", c, i)
			}
		}

		// Weights from the data: zeros stay zero, the rest keep their value
		// or become zero exactly where Mask drops.
		pw := make([]float32, len(ids))
		for i := range pw {
			pw[i] = float32(data[4*i+1]%3) / 2 // 0, 0.5 or 1
		}
		before := append([]float32(nil), pw...)
		n3 := m.Apply(ids, pw)
		count = 0
		for i := range pw {
			switch {
			case want[i] && pw[i] != 0:
				t.Fatalf("%v: dropped target %d kept weight %v", c, i, pw[i])
			case !want[i] && pw[i] != before[i]:
				t.Fatalf("%v: kept target %d changed weight %v → %v", c, i, before[i], pw[i])
			case want[i] && before[i] != 0:
				count++
			}
		}
		if n3 != count {
			t.Fatalf("%v: Apply returned %d, dropped %d non-zero weights", c, n3, count)
		}
	})
}
