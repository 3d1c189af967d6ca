package engine

import (
	"errors"
	"testing"
)

// fakeStorage is a storage for Overlap's tests.
type fakeStorage struct{ n int }

func (s *fakeStorage) Device() Device { return Device{} }
func (s *fakeStorage) DType() DType   { return F32 }
func (s *fakeStorage) Len() int       { return s.n }

// sliceStorage is a storage of a type that cannot be compared with ==.
type sliceStorage []float32

func (s sliceStorage) Device() Device { return Device{} }
func (s sliceStorage) DType() DType   { return F32 }
func (s sliceStorage) Len() int       { return len(s) }

func TestMisuseError(t *testing.T) {
	m := Misusef("cpu", "Gemm", MisuseShape, "A needs %d elements but its tensor has %d", 12, 8)
	if got, want := m.Error(), "cpu: Gemm: shape: A needs 12 elements but its tensor has 8"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var err error = m
	var target *Misuse
	if !errors.As(err, &target) || target.Class != MisuseShape || target.Op != "Gemm" || target.Backend != "cpu" {
		t.Errorf("errors.As gave %+v", target)
	}
	for c, want := range map[MisuseClass]string{
		MisuseShape: "shape", MisuseDType: "dtype", MisuseAlias: "alias", MisuseRange: "range", MisuseTensor: "tensor",
		0: "MisuseClass(0)", 9: "MisuseClass(9)",
	} {
		if got := c.String(); got != want {
			t.Errorf("MisuseClass(%d).String() = %q, want %q", int(c), got, want)
		}
	}
}

func TestOverlap(t *testing.T) {
	s, other := &fakeStorage{n: 100}, &fakeStorage{n: 100}
	view := func(st Storage, off int, shape ...int) *Tensor {
		return &Tensor{Storage: st, Offset: off, Shape: shape}
	}
	for _, c := range []struct {
		name          string
		a, b          *Tensor
		same, partial bool
	}{
		{"one view", view(s, 10, 4, 5), view(s, 10, 4, 5), true, false},
		{"same elements, other shape", view(s, 10, 20), view(s, 10, 4, 5), true, false},
		{"contained", view(s, 10, 20), view(s, 12, 3), false, true},
		{"head", view(s, 10, 20), view(s, 10, 5), false, true},
		{"straddling", view(s, 10, 20), view(s, 29, 5), false, true},
		{"adjacent", view(s, 10, 20), view(s, 30, 5), false, false},
		{"before", view(s, 10, 20), view(s, 0, 10), false, false},
		{"other storage", view(s, 10, 20), view(other, 10, 20), false, false},
		{"empty", view(s, 10, 0), view(s, 10, 20), false, false},
		{"empty pair", view(s, 10, 0), view(s, 10, 0), false, false},
		{"nil", nil, view(s, 10, 20), false, false},
		{"nil storage", view(nil, 0, 3), view(nil, 0, 3), false, false},
		{"incomparable storage", view(sliceStorage(make([]float32, 9)), 0, 3), view(sliceStorage(make([]float32, 9)), 0, 3), false, false},
	} {
		for _, swap := range []bool{false, true} {
			a, b := c.a, c.b
			if swap {
				a, b = b, a
			}
			same, partial := Overlap(a, b)
			if same != c.same || partial != c.partial {
				t.Errorf("%s (swapped %v): Overlap = %v, %v; want %v, %v", c.name, swap, same, partial, c.same, c.partial)
			}
		}
	}
}
