package comm

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/memtrain/memtrain/internal/units"
)

// Grid is the shape of AxoNN's 4D grid: Data × X × Y × Z ranks. World
// ranks are laid out with X fastest, then Y, then Z, then data (DESIGN.md,
// "AxoNN 4D algorithm"), so that X, the group with the most traffic, spans
// neighbouring ranks (the same node, the fastest links).
type Grid struct {
	Data, X, Y, Z int
}

// Size is the number of ranks, Data·X·Y·Z.
func (g Grid) Size() int { return g.Data * g.X * g.Y * g.Z }

// Coords returns the grid coordinates of a world rank.
func (g Grid) Coords(rank int) (data, x, y, z int) {
	x = rank % g.X
	rank /= g.X
	y = rank % g.Y
	rank /= g.Y
	z = rank % g.Z
	return rank / g.Z, x, y, z
}

// Rank is the world rank at the given coordinates, the inverse of Coords.
func (g Grid) Rank(data, x, y, z int) int {
	return ((data*g.Z+z)*g.Y+y)*g.X + x
}

func (g Grid) String() string {
	return fmt.Sprintf("data %d × x %d × y %d × z %d", g.Data, g.X, g.Y, g.Z)
}

// Groups are one rank's communicators of a Grid. Each group is named
// after its field: "x", "y", "z", "data", and "data-z" for DataZ.
type Groups struct {
	Grid  Grid
	World Comm
	// X, Y, Z and Data hold the ranks that differ only in that coordinate.
	X, Y, Z, Data Comm
	// DataZ holds the ranks that differ only in their data and Z
	// coordinates, which split the batch between them: the group over
	// which the loss is normalised and norm-weight gradients are summed.
	DataZ Comm
}

// SplitGrid splits world into the groups of the grid g. It is collective
// over world, whose size must be g.Size(). The rank of a member in each
// group is its coordinate there (its data·Z + z in DataZ).
func SplitGrid(world Comm, g Grid) (*Groups, error) {
	if g.Data < 1 || g.X < 1 || g.Y < 1 || g.Z < 1 {
		return nil, fmt.Errorf("comm: grid %v: every dimension must be at least 1", g)
	}
	if g.Size() != world.Size() {
		return nil, fmt.Errorf("comm: grid %v has %d ranks, but group %q has %d", g, g.Size(), world.Group(), world.Size())
	}
	d, x, y, z := g.Coords(world.Rank())
	out := &Groups{Grid: g, World: world}
	splits := []struct {
		name       string
		dst        *Comm
		color, key int
	}{
		// The color is the rank with the group's own coordinates zeroed:
		// equal exactly for the ranks that differ only there.
		{"x", &out.X, g.Rank(d, 0, y, z), x},
		{"y", &out.Y, g.Rank(d, x, 0, z), y},
		{"z", &out.Z, g.Rank(d, x, y, 0), z},
		{"data", &out.Data, g.Rank(0, x, y, z), d},
		{"data-z", &out.DataZ, g.Rank(0, x, y, 0), d*g.Z + z},
	}
	for _, s := range splits {
		c, err := world.Split(s.name, s.color, s.key)
		if err != nil {
			return nil, fmt.Errorf("comm: grid %v: %w", g, err)
		}
		*s.dst = c
	}
	return out, nil
}

// Close closes the groups split from the world (not the world itself).
func (gs *Groups) Close() error {
	var first error
	for _, c := range []Comm{gs.X, gs.Y, gs.Z, gs.Data, gs.DataZ} {
		if c == nil {
			continue
		}
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ParseGrid reads a grid as the CLI's --parallel gives it, such as
// "dp=2,x=2,y=1,z=2": axes dp (or data), x, y and z, those left out 1.
func ParseGrid(s string) (Grid, error) {
	g := Grid{Data: 1, X: 1, Y: 1, Z: 1}
	seen := map[string]bool{}
	parts, err := units.SplitList(s)
	if err != nil {
		return g, err
	}
	for _, part := range parts {
		key, val, ok := strings.Cut(part, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if !ok || err != nil || n < 1 {
			return g, fmt.Errorf("grid %q: %q is not AXIS=N with N ≥ 1", s, part)
		}
		if seen[key] {
			return g, fmt.Errorf("grid %q: %s given twice", s, key)
		}
		seen[key] = true
		switch key {
		case "dp", "data":
			g.Data = n
		case "x":
			g.X = n
		case "y":
			g.Y = n
		case "z":
			g.Z = n
		default:
			return g, fmt.Errorf("grid %q: unknown axis %q (want dp, x, y or z)", s, key)
		}
	}
	if len(seen) == 0 {
		return g, fmt.Errorf("grid %q: no axis given (e.g. dp=2,x=2,y=1,z=2)", s)
	}
	return g, nil
}
