package parallel_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
)

// TestBytesCollectives: rank 0's bytes reach every rank; every rank gets
// every rank's bytes; one rank's error fails AgreeGather on every rank
// with that rank's message.
func TestBytesCollectives(t *testing.T) {
	shape := comm.Grid{Data: 2, X: 2, Y: 1, Z: 2}
	err := launch.Local(shape, parallel.Overlap{}, func(g *parallel.Grid) error {
		b := cpu.New(cpu.Options{Threads: 1})
		mine := []byte(fmt.Sprintf("from rank %d: \x00\xff odd", g.Rank()))
		got, err := g.Broadcast(b, mine, 64)
		if err != nil {
			return err
		}
		if string(got) != "from rank 0: \x00\xff odd" {
			return fmt.Errorf("rank %d: broadcast %q", g.Rank(), got)
		}
		all, err := g.GatherBytes(b, mine, 64)
		if err != nil {
			return err
		}
		for r, m := range all {
			if want := fmt.Sprintf("from rank %d: \x00\xff odd", r); string(m) != want {
				return fmt.Errorf("rank %d: gathered %q from %d", g.Rank(), m, r)
			}
		}
		if all, err := g.AgreeGather(b, nil, mine[:5+g.Rank()%2], 16); err != nil || len(all) != shape.Size() || len(all[1]) != 6 {
			return fmt.Errorf("rank %d: %v %q", g.Rank(), err, all)
		}
		var mineErr error
		if g.Rank() == 5 {
			mineErr = errors.New("disk full")
		}
		_, err = g.AgreeGather(b, mineErr, nil, 16)
		switch {
		case g.Rank() == 5 && err != mineErr:
			return fmt.Errorf("rank 5: %v", err)
		case g.Rank() != 5 && (err == nil || !strings.Contains(err.Error(), "rank 5: disk full")):
			return fmt.Errorf("rank %d: %v", g.Rank(), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
