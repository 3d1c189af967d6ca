package comm

import (
	"strings"
	"testing"
)

func TestParseGrid(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Grid
		err  string
	}{
		{"dp=2,x=2,y=1,z=2", Grid{2, 2, 1, 2}, ""},
		{"data=4, z=2", Grid{4, 1, 1, 2}, ""},
		{"X=8", Grid{1, 8, 1, 1}, ""},
		{"x=2,x=2", Grid{}, "x given twice"},
		{"w=2", Grid{}, `unknown axis "w"`},
		{"x=0", Grid{}, "N ≥ 1"},
		{"run-1", Grid{}, "is not AXIS=N"},
		{"", Grid{}, "no axis given"},
		{"dp=2,,x=2", Grid{}, `list "dp=2,,x=2": item 2 of 3 is empty`},
		{"x=2,", Grid{}, "item 2 of 2 is empty"},
	} {
		g, err := ParseGrid(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseGrid(%q): %v, want an error with %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || g != c.want {
			t.Errorf("ParseGrid(%q) = %v, %v; want %v", c.in, g, err, c.want)
		}
	}
}
