package numtest

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

var (
	nan  = math.NaN()
	inf  = math.Inf(1)
	nan2 = float32(math.NaN())
)

// wantErr checks err against a wanted substring: "" means no error.
func wantErr(t *testing.T, name string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: unexpected error: %v", name, err)
	case want != "" && err == nil:
		t.Errorf("%s: passed, want an error containing %q", name, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %q, want it to contain %q", name, err, want)
	}
}

func TestClose(t *testing.T) {
	t.Setenv(MutateEnv, "")
	for _, c := range []struct {
		name      string
		got, want []float64
		tol       Tol
		err       string
	}{
		{"equal", []float64{1, 2, 3}, []float64{1, 2, 3}, Tol{}, ""},
		{"signed zeros equal in value", []float64{0}, []float64{math.Copysign(0, -1)}, Tol{}, ""},
		{"zero tolerance", []float64{1, 2}, []float64{1, 2.0000001}, Tol{}, "element 1 of 2"},
		{"abs passes", []float64{1, 2.05}, []float64{1, 2}, Tol{Abs: 0.1}, ""},
		{"abs fails", []float64{1, 2.2}, []float64{1, 2}, Tol{Abs: 0.1}, "got 2.2, want 2"},
		{"rel passes", []float64{100.5, 1.005}, []float64{100, 1}, Tol{Rel: 0.01}, ""},
		{"rel fails on the small element", []float64{100.5, 1.5}, []float64{100, 1}, Tol{Rel: 0.01}, "element 1 of 2"},
		{"max scales by the largest", []float64{100.5, 1.5}, []float64{100, 1}, Tol{Max: 0.01}, ""},
		{"floor", []float64{1e-3}, []float64{0}, Tol{Max: 1e-2, Floor: 0.1}, ""},
		{"no floor", []float64{1e-3}, []float64{0}, Tol{Max: 1e-2}, "exceeds 0"},
		{"worst by ratio", []float64{1.5, 12}, []float64{1, 10}, Tol{Rel: 0.1}, "element 0 of 2"},
		{"NaN got", []float64{1, nan, 3}, []float64{1, 2, 3}, Tol{Abs: 1}, "element 1 of 3: got NaN, want 2: not finite"},
		{"NaN want", []float64{1, 2}, []float64{1, nan}, Tol{Abs: 1}, "not finite"},
		{"Inf got", []float64{inf}, []float64{1}, Tol{Abs: 1}, "not finite"},
		{"-Inf want", []float64{1}, []float64{-inf}, Tol{Abs: 1}, "not finite"},
		{"both NaN refused by default", []float64{nan}, []float64{nan}, Tol{Abs: 1}, "not finite"},
		{"NonFinite: NaN meets NaN", []float64{nan, 1}, []float64{nan, 1}, Tol{NonFinite: true}, ""},
		{"NonFinite: Inf meets Inf", []float64{inf, -inf}, []float64{inf, -inf}, Tol{NonFinite: true}, ""},
		{"NonFinite: NaN against a number", []float64{nan}, []float64{1}, Tol{NonFinite: true, Abs: 10}, "not finite"},
		{"NonFinite: Inf against -Inf", []float64{inf}, []float64{-inf}, Tol{NonFinite: true}, "not finite"},
		{"NonFinite: finite values still checked", []float64{nan, 2}, []float64{nan, 1}, Tol{NonFinite: true}, "element 1 of 2"},
		{"nil got", nil, []float64{1}, Tol{Abs: 1}, "got is nil"},
		{"nil want", []float64{1}, nil, Tol{Abs: 1}, "want is nil"},
		{"both nil", nil, nil, Tol{Abs: 1}, "both slices are nil"},
		{"empty", []float64{}, []float64{}, Tol{Abs: 1}, "no values"},
		{"short", []float64{1, 2}, []float64{1, 2, 3}, Tol{Abs: 1}, "got 2 values, want 3"},
		{"long", []float64{1, 2, 3, 4}, []float64{1, 2, 3}, Tol{Abs: 1}, "got 4 values, want 3"},
	} {
		wantErr(t, c.name, Close(c.got, c.want, c.tol), c.err)
	}
}

func TestCloseMixedWidths(t *testing.T) {
	t.Setenv(MutateEnv, "")
	got := []float32{1, 2, nan2}
	want := []float64{1, 2, 3}
	wantErr(t, "float32 against float64 with NaN", Close(got, want, Tol{Abs: 1}), "not finite")
	wantErr(t, "float32 against float64", Close(got[:2], want[:2], Tol{Abs: 1e-7}), "")
	wantErr(t, "short float32", Close(got[:1], want[:2], Tol{Abs: 1}), "got 1 values, want 2")
}

func TestCloseL2(t *testing.T) {
	t.Setenv(MutateEnv, "")
	for _, c := range []struct {
		name      string
		got, want []float32
		tol       float64
		err       string
	}{
		{"equal", []float32{3, 4}, []float32{3, 4}, 0, ""},
		{"within", []float32{3, 4.05}, []float32{3, 4}, 0.011, ""},
		{"beyond", []float32{3, 4.1}, []float32{3, 4}, 0.011, "relative L2 error 0.02 exceeds 0.011"},
		{"zero reference needs zero", []float32{0, 1e-3}, []float32{0, 0}, 0.01, ""},
		{"zero reference beyond", []float32{0, 1}, []float32{0, 0}, 0.01, "exceeds"},
		{"NaN", []float32{3, nan2}, []float32{3, 4}, 1, "not finite"},
		{"Inf", []float32{3, float32(inf)}, []float32{3, 4}, 1, "not finite"},
		{"nil", nil, []float32{3, 4}, 1, "got is nil"},
		{"short", []float32{3}, []float32{3, 4}, 1, "got 1 values, want 2"},
		{"long", []float32{3, 4, 5}, []float32{3, 4}, 1, "got 3 values, want 2"},
	} {
		wantErr(t, c.name, CloseL2(c.got, c.want, c.tol), c.err)
	}
}

func TestCloseBounds(t *testing.T) {
	t.Setenv(MutateEnv, "")
	want := []float64{1, 2, 3}
	for _, c := range []struct {
		name  string
		got   []float64
		bound []float64
		err   string
	}{
		{"within", []float64{1.1, 2, 2.5}, []float64{0.2, 0, 0.5}, ""},
		{"beyond", []float64{1.1, 2, 2.4}, []float64{0.2, 0, 0.5}, "element 2 of 3: got 2.4, want 3"},
		{"a zero bound", []float64{1, 2.001, 3}, []float64{1, 0, 1}, "element 1 of 3"},
		{"NaN got", []float64{1, nan, 3}, []float64{1, 1, 1}, "not finite"},
		{"NaN bound", []float64{1, 2, 3}, []float64{1, nan, 1}, "bound NaN"},
		{"negative bound", []float64{1, 2, 3}, []float64{1, -1, 1}, "bound -1"},
		{"infinite bound", []float64{1, 2, 3}, []float64{1, inf, 1}, "bound +Inf"},
		{"short bounds", []float64{1, 2, 3}, []float64{1, 1}, "2 bounds for 3 values"},
		{"short got", []float64{1, 2}, []float64{1, 1, 1}, "got 2 values, want 3"},
		{"nil got", nil, []float64{1, 1, 1}, "got is nil"},
	} {
		wantErr(t, c.name, CloseBounds(c.got, want, c.bound), c.err)
	}
}

func TestCloseMax(t *testing.T) {
	t.Setenv(MutateEnv, "")
	wantErr(t, "within", CloseMax([]float32{10, 1.05}, []float32{10, 1}, 0.01), "")
	wantErr(t, "beyond", CloseMax([]float32{10, 1.2}, []float32{10, 1}, 0.01), "element 1 of 2")
	wantErr(t, "NaN", CloseMax([]float32{10, nan2}, []float32{10, 1}, 1), "not finite")
}

func TestScalar(t *testing.T) {
	t.Setenv(MutateEnv, "")
	wantErr(t, "within", Scalar(1.001, 1, Tol{Rel: 0.01}), "")
	wantErr(t, "beyond", Scalar(1.1, 1, Tol{Rel: 0.01}), "got 1.1, want 1")
	wantErr(t, "NaN", Scalar(nan, 1, Tol{Abs: inf}), "not finite")
	wantErr(t, "Inf", Scalar(inf, inf, Tol{}), "not finite")
	wantErr(t, "Inf allowed", Scalar(inf, inf, Tol{NonFinite: true}), "")
	if err := Scalar(1.1, 1, Tol{Rel: 0.01}); strings.Contains(err.Error(), "element") {
		t.Errorf("a scalar's error names an element: %v", err)
	}
}

func TestEqual(t *testing.T) {
	t.Setenv(MutateEnv, "")
	negZero := float32(math.Copysign(0, -1))
	wantErr(t, "equal", Equal([]float32{1, 2}, []float32{1, 2}), "")
	wantErr(t, "same NaN", Equal([]float32{nan2}, []float32{nan2}), "")
	wantErr(t, "differs", Equal([]float32{1, 2}, []float32{1, 3}), "element 1 of 2: got 2 (0x40000000), want 3 (0x40400000)")
	wantErr(t, "signed zero", Equal([]float32{negZero}, []float32{0}), "element 0")
	wantErr(t, "float64 width", Equal([]float64{1}, []float64{math.Nextafter(1, 2)}), "0x3ff0000000000001")
	wantErr(t, "NaN against number", Equal([]float32{nan2}, []float32{1}), "element 0")
	wantErr(t, "nil", Equal(nil, []float32{1}), "got is nil")
	wantErr(t, "short", Equal([]float32{1}, []float32{1, 2}), "got 1 values, want 2")
	wantErr(t, "long", Equal([]float32{1, 2, 3}, []float32{1, 2}), "got 3 values, want 2")
}

func TestMeasure(t *testing.T) {
	t.Setenv(MutateEnv, "")
	d, err := Measure([]float32{3, 4.5, 0}, []float64{3, 4, 0})
	if err != nil {
		t.Fatal(err)
	}
	if d.MaxAbs != 0.5 || d.Worst != 1 || d.Got != 4.5 || d.Want != 4 || d.MaxRel != 0.125 || math.Abs(d.L2-0.1) > 1e-15 {
		t.Errorf("Measure = %+v, want MaxAbs 0.5 at 1 (4.5 against 4), MaxRel 0.125, L2 0.1", d)
	}
	for _, c := range []struct {
		name      string
		got, want []float32
		err       string
	}{
		{"NaN", []float32{nan2}, []float32{1}, "not finite"},
		{"Inf want", []float32{1}, []float32{float32(inf)}, "not finite"},
		{"nil", nil, []float32{1}, "got is nil"},
		{"short", []float32{1}, []float32{1, 2}, "got 1 values"},
		{"long", []float32{1, 2}, []float32{1}, "got 2 values"},
	} {
		_, err := Measure(c.got, c.want)
		wantErr(t, c.name, err, c.err)
	}
}

func TestEach(t *testing.T) {
	t.Setenv(MutateEnv, "")
	l2 := func(g, w []float32) error { return CloseL2(g, w, 1e-6) }
	want := map[string][]float32{"a": {1, 2}, "b": {3}}
	wantErr(t, "same", Each(map[string][]float32{"a": {1, 2}, "b": {3}}, want, l2), "")
	wantErr(t, "missing", Each(map[string][]float32{"a": {1, 2}}, want, l2), `tensor "b" missing`)
	wantErr(t, "extra", Each(map[string][]float32{"a": {1, 2}, "b": {3}, "c": {1}}, want, l2), `tensor "c" not in the reference`)
	wantErr(t, "differs", Each(map[string][]float32{"a": {1, 2}, "b": {nan2}}, want, l2), `tensor "b": element 0 of 1`)
	wantErr(t, "nil tensor", Each(map[string][]float32{"a": nil, "b": {3}}, want, l2), `tensor "a": got is nil`)
	wantErr(t, "EachL2", EachL2(map[string][]float32{"a": {1, 2}, "b": {3.1}}, want, 0.01), `tensor "b": relative L2 error`)
	wantErr(t, "EachClose", EachClose(map[string][]float32{"a": {1, 2}, "b": {3.1}}, want, Tol{Abs: 0.2}), "")
	wantErr(t, "empty reference", Each(map[string][]float32{}, map[string][]float32{}, l2), "no tensors")
}

// TestMutations: under each mutation, every function fails on values it
// passes without one, names the mutation, and leaves the caller's slice
// unchanged.
func TestMutations(t *testing.T) {
	for _, m := range Mutations() {
		t.Run(m, func(t *testing.T) {
			t.Setenv(MutateEnv, m)
			got := []float32{1, 2, 3, 4}
			want := []float32{1, 2, 3, 4}
			loose := Tol{Abs: 1, Rel: 1, Max: 1}
			errs := map[string]error{
				"Close":       Close(got, want, loose),
				"CloseL2":     CloseL2(got, want, 1),
				"Equal":       Equal(got, want),
				"CloseBounds": CloseBounds(got, want, []float32{1, 1, 1, 1}),
				"Scalar":      Scalar(2, 2, loose),
				"CloseULP":    CloseULP(got, []float64{1, 2, 3, 4}, 1e6),
				"Each": Each(map[string][]float32{"a": got, "b": got}, map[string][]float32{"a": want, "b": want},
					func(g, w []float32) error { return Close(g, w, loose) }),
			}
			d, err := Measure(got, want)
			if err == nil && d.L2 > 1 {
				err = fmt.Errorf("relative L2 error %g [numtest mutation %s]", d.L2, m)
			}
			errs["Measure"] = err
			du, err := MeasureULP(got, []float64{1, 2, 3, 4})
			if err == nil && du.Max > 1e6 {
				err = fmt.Errorf("%g ulp [numtest mutation %s]", du.Max, m)
			}
			errs["MeasureULP"] = err
			for name, err := range errs {
				if err == nil {
					t.Errorf("%s passed under mutation %s", name, m)
				} else if !strings.Contains(err.Error(), "[numtest mutation "+m+"]") {
					t.Errorf("%s: error %q does not name mutation %s", name, err, m)
				}
			}
			if got[2] != 3 || len(got) != 4 {
				t.Errorf("the caller's slice changed: %v", got)
			}
		})
	}
}

func TestMutationUnknown(t *testing.T) {
	t.Setenv(MutateEnv, "nans")
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "nans") {
			t.Errorf("a misspelt mutation did not panic naming it: %v", r)
		}
	}()
	_ = Close([]float32{1}, []float32{1}, Tol{})
}

func ExampleClose() {
	got := []float32{1.0001, 2, float32(math.NaN())}
	want := []float64{1, 2, 3}
	fmt.Println(Close(got[:2], want[:2], Tol{Rel: 1e-3}))
	fmt.Println(Close(got, want, Tol{Rel: 1e-3}))
	fmt.Println(Close(got[:2], want, Tol{Rel: 1e-3}))
	// Output:
	// <nil>
	// element 2 of 3: got NaN, want 3: not finite
	// got 2 values, want 3
}
