package gemm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// openBLASOrSkip loads OpenBLAS or skips the test.
func openBLASOrSkip(t testing.TB, threads int) Impl {
	t.Helper()
	o, err := OpenBLAS(threads)
	if err != nil {
		t.Skipf("OpenBLAS not available (apt-get install libopenblas0-pthread): %v", err)
	}
	return o
}

func TestOpenBLAS(t *testing.T) {
	o := openBLASOrSkip(t, 2)
	if o.Name() != "openblas" || o.Threads() != 2 {
		t.Errorf("OpenBLAS(2) = %s with %d threads", o.Name(), o.Threads())
	}
	if ob, ok := o.(interface {
		Library() string
		Core() string
	}); ok {
		t.Logf("loaded %s, core %q", ob.Library(), ob.Core())
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for si, sz := range testSizes {
		for ti := 0; ti < 4; ti++ {
			s := allScalars[(si+ti)%len(allScalars)]
			p := newProblem(rng, ti&1 != 0, ti&2 != 0, sz[0], sz[1], sz[2], s.alpha, s.beta, ti%2*3)
			want, bound := p.want()
			p.check(t, "openblas", p.run(o), want, bound)
		}
	}
	o1 := openBLASOrSkip(t, 1)
	p := newProblem(rng, false, false, 64, 64, 64, 1, 0, 0)
	want, bound := p.want()
	p.check(t, "openblas/1", p.run(o1), want, bound)
}

func TestOpenBLASMissing(t *testing.T) {
	if !canLoadOpenBLAS {
		_, err := OpenBLAS(1)
		if !errors.Is(err, ErrOpenBLASUnavailable) || !strings.Contains(err.Error(), "cannot load") {
			t.Errorf("error %v, want one saying this build cannot load OpenBLAS", err)
		}
		return
	}
	t.Setenv(openBLASEnv, "/nonexistent/libopenblas.so.0")
	_, err := OpenBLAS(1)
	if err == nil {
		t.Fatal("OpenBLAS loaded from a path that does not exist")
	}
	if !errors.Is(err, ErrOpenBLASUnavailable) || !strings.Contains(err.Error(), "/nonexistent/libopenblas.so.0") {
		t.Errorf("error %q does not match ErrOpenBLASUnavailable or name the path tried", err)
	}
}

func TestOpenBLASPaths(t *testing.T) {
	t.Setenv(openBLASEnv, "")
	paths := openBLASPaths()
	if len(paths) < 2 || paths[0] == "" {
		t.Fatalf("paths = %v", paths)
	}
	t.Setenv(openBLASEnv, "/x/libopenblas.so")
	if got := fmt.Sprint(openBLASPaths()); got != "[/x/libopenblas.so]" {
		t.Errorf("with $%s set, paths = %s", openBLASEnv, got)
	}
}
