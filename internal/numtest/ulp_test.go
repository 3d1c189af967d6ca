package numtest

import (
	"math"
	"strings"
	"testing"
)

func TestULP(t *testing.T) {
	for _, c := range []struct{ w, want float64 }{
		{1, 0x1p-23},
		{1.5, 0x1p-23},
		{0.999, 0x1p-24},
		{-2, 0x1p-22},
		{math.MaxFloat32, 0x1p104},
		{0x1p-126, 0x1p-149},
		{0x1p-130, 0x1p-149}, // subnormal: the spacing below 2⁻¹²⁶
		{0, 0x1p-149},
		{math.Copysign(0, -1), 0x1p-149},
	} {
		if got := ULP(c.w); got != c.want {
			t.Errorf("ULP(%g) = %g, want %g", c.w, got, c.want)
		}
	}
}

func TestCloseULP(t *testing.T) {
	t.Setenv(MutateEnv, "")
	nan64, inf64 := math.NaN(), math.Inf(1)
	one := float32(1)
	next := math.Nextafter32(one, 2)
	for _, c := range []struct {
		name string
		got  []float32
		want []float64
		max  float64
		err  string
	}{
		{"exact", []float32{1, 2, 3}, []float64{1, 2, 3}, 0, ""},
		{"one ulp passes", []float32{next, 2}, []float64{1, 2}, 1, ""},
		{"one ulp fails at half", []float32{next, 2}, []float64{1, 2}, 0.5, "element 0 of 2: got 1.00000012, want 1: 1 ulp exceeds 0.5 ulp"},
		{"measured at want, not at its rounding", []float32{1}, []float64{1 + 0x1p-25}, 0.2, "0.25 ulp exceeds 0.2 ulp"},
		{"worst element named", []float32{1, 2, 4}, []float64{1 + 0x1p-23, 2 + 3*0x1p-22, 4}, 2, "element 1 of 3: got 2, want 2.00000072: 3 ulp exceeds 2 ulp"},
		{"subnormal spacing at zero", []float32{math.SmallestNonzeroFloat32}, []float64{0}, 1, ""},
		{"NaN got", []float32{1, float32(nan64), 3}, []float64{1, 2, 3}, 100, "element 1 of 3: got NaN, want 2: not finite"},
		{"NaN want", []float32{1, 2}, []float64{1, nan64}, 100, "not finite"},
		{"both NaN", []float32{float32(nan64)}, []float64{nan64}, 100, "not finite"},
		{"Inf got", []float32{float32(inf64)}, []float64{math.MaxFloat32}, 1e30, "not finite"},
		{"-Inf want", []float32{1}, []float64{-inf64}, 1e30, "not finite"},
		{"Inf both", []float32{float32(inf64)}, []float64{inf64}, 1e30, "not finite"},
		{"nil got", nil, []float64{1}, 1, "got is nil"},
		{"nil want", []float32{1}, nil, 1, "want is nil"},
		{"both nil", nil, nil, 1, "both slices are nil"},
		{"empty", []float32{}, []float64{}, 1, "no values"},
		{"short got", []float32{1, 2}, []float64{1, 2, 3}, 1, "got 2 values, want 3"},
		{"long got", []float32{1, 2, 3, 4}, []float64{1, 2, 3}, 1, "got 4 values, want 3"},
		{"NaN bound", []float32{1}, []float64{1}, nan64, "exceeds NaN"},
	} {
		wantErr(t, c.name, CloseULP(c.got, c.want, c.max), c.err)
		// MeasureULP refuses what CloseULP refuses, and measures the rest.
		refused := c.err
		if strings.Contains(c.err, "exceeds") {
			refused = ""
		}
		_, err := MeasureULP(c.got, c.want)
		wantErr(t, "MeasureULP "+c.name, err, refused)
	}
	if err := CloseULP([]float64{1 + 0x1p-30}, []float32{1}, 0.1); err != nil {
		t.Errorf("float64 got, float32 want: %v", err)
	}
}

func TestMeasureULP(t *testing.T) {
	t.Setenv(MutateEnv, "")
	d, err := MeasureULP([]float32{1, 2 + 0x1p-21, 4}, []float64{1, 2, 4})
	if err != nil {
		t.Fatal(err)
	}
	if d != (ULPDiff{Max: 2, Worst: 1, Got: 2 + 0x1p-21, Want: 2}) {
		t.Errorf("MeasureULP = %+v, want 2 ulp at element 1", d)
	}
}
