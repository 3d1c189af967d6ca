package data

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
)

// LoaderConfig controls a Loader.
type LoaderConfig struct {
	// Split is the split to read: Train (the default) or Holdout.
	Split Split
	// BatchSize is the number of sequences in a global batch, over all
	// ranks; it must be a multiple of Ranks.
	BatchSize int
	// Shuffle orders each epoch by a permutation drawn from (Seed, epoch);
	// otherwise every epoch reads the sequences in order.
	Shuffle bool
	Seed    uint64
	// Ranks is the number of data-parallel ranks sharing each global
	// batch (0 means 1), and Rank this one's, in [0, Ranks).
	Ranks, Rank int
}

// A Batch is one rank's share of a global batch: B sequences of T
// positions, flattened row-major, as the engine's llama.Batch takes them.
type Batch struct {
	IDs     []int32   // B×T inputs
	Targets []int32   // B×T: the token that follows each input
	Weights []float32 // B×T: 1, or 0 for padding (and, in a chat dataset, for prompt targets)
	B, T    int
	// DocIDs are the document ids of the B sequences (see
	// Store.Sequence).
	DocIDs []int
	// Epoch is the epoch of the global batch's first sequence, from 0.
	Epoch int
	// Position is the loader's position before this batch: SetPosition(Position)
	// makes Next return this batch again.
	Position int64
}

// A Loader reads batches of training sequences from a Store, the same on
// every run with the same configuration.
//
// The sequences of a split form an endless stream, epoch after epoch, each
// epoch a permutation of them (or the identity without Shuffle). Global
// batch k is samples [k×BatchSize, (k+1)×BatchSize) of the stream, and rank
// r gets the r-th contiguous block of BatchSize/Ranks of them. A batch that
// reaches the end of an epoch continues into the next one (it wraps), so no
// sequence is dropped or repeated within an epoch and every global batch is
// full. The position counts global samples from the start of the stream and
// identifies the state completely: SetPosition(p) followed by Next returns what an
// uninterrupted loader returned at position p.
//
// A Loader is not safe for concurrent use.
type Loader struct {
	s     *Store
	cfg   LoaderConfig
	split Split
	n     int64 // sequences in the split
	b     int   // sequences per rank
	pos   int64
	perms [2]perm // the two most recent epochs' orders
}

type perm struct {
	epoch int64
	order []int32 // nil: not computed
}

// NewLoader returns a loader of a store's split, at position 0.
func NewLoader(s *Store, cfg LoaderConfig) (*Loader, error) {
	if cfg.Split == "" {
		cfg.Split = Train
	}
	if _, err := cfg.Split.index(); err != nil {
		return nil, err
	}
	if cfg.Ranks == 0 {
		cfg.Ranks = 1
	}
	switch {
	case cfg.Ranks < 0 || cfg.Rank < 0 || cfg.Rank >= cfg.Ranks:
		return nil, fmt.Errorf("data: rank %d of %d ranks", cfg.Rank, cfg.Ranks)
	case cfg.BatchSize <= 0 || cfg.BatchSize%cfg.Ranks != 0:
		return nil, fmt.Errorf("data: batch size %d is not a positive multiple of the %d ranks", cfg.BatchSize, cfg.Ranks)
	}
	n := int64(s.NumSequences(cfg.Split))
	if n == 0 {
		return nil, fmt.Errorf("data: %s: the %s split has no sequences", s.Dir(), cfg.Split)
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("data: %s: %d sequences, more than a loader can shuffle", s.Dir(), n)
	}
	return &Loader{s: s, cfg: cfg, split: cfg.Split, n: n, b: cfg.BatchSize / cfg.Ranks,
		perms: [2]perm{{epoch: -1}, {epoch: -1}}}, nil
}

// NumSequences returns the number of sequences in an epoch.
func (l *Loader) NumSequences() int64 { return l.n }

// Position returns the number of global samples read: the position of the
// next batch.
func (l *Loader) Position() int64 { return l.pos }

// SetPosition sets the position, as returned by Position or
// Batch.Position, to resume a run exactly. (It is not named Seek, whose
// signature belongs to io.Seeker.)
func (l *Loader) SetPosition(position int64) error {
	if position < 0 {
		return fmt.Errorf("data: negative loader position %d", position)
	}
	l.pos = position
	return nil
}

// Next returns this rank's share of the next global batch and advances the
// position by BatchSize.
func (l *Loader) Next() (Batch, error) {
	if l.s.closed {
		return Batch{}, errClosed
	}
	T := l.s.SeqLen()
	b := Batch{
		IDs: make([]int32, l.b*T), Targets: make([]int32, l.b*T), Weights: make([]float32, l.b*T),
		B: l.b, T: T, DocIDs: make([]int, l.b),
		Epoch: int(l.pos / l.n), Position: l.pos,
	}
	first := l.pos + int64(l.cfg.Rank*l.b)
	for i := range l.b {
		g := first + int64(i)
		seq := l.sequence(g/l.n, g%l.n)
		row := b.IDs[i*T : (i+1)*T]
		doc, err := l.s.Sequence(l.split, seq, row, b.Targets[i*T:(i+1)*T], b.Weights[i*T:(i+1)*T])
		if err != nil {
			return Batch{}, err
		}
		b.DocIDs[i] = doc
	}
	l.pos += int64(l.cfg.BatchSize)
	return b, nil
}

// sequence returns the k-th sequence of an epoch.
func (l *Loader) sequence(epoch, k int64) int {
	if !l.cfg.Shuffle {
		return int(k)
	}
	for i := range l.perms {
		if l.perms[i].epoch == epoch {
			return int(l.perms[i].order[k])
		}
	}
	// Replace the older of the two.
	old := &l.perms[0]
	if l.perms[1].epoch < old.epoch {
		old = &l.perms[1]
	}
	old.epoch = epoch
	old.order = permutation(old.order, int(l.n), l.cfg.Seed, uint64(epoch))
	return int(old.order[k])
}

// permutation returns a permutation of [0, n) by a Fisher–Yates shuffle
// driven by PCG (math/rand/v2) seeded with (seed, epoch), with Lemire's
// unbiased bounded draws: the same on every platform and Go version.
func permutation(buf []int32, n int, seed, epoch uint64) []int32 {
	p := buf[:0]
	for i := range n {
		p = append(p, int32(i))
	}
	src := rand.NewPCG(seed, epoch)
	for i := n - 1; i > 0; i-- {
		j := boundedDraw(src, uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// boundedDraw returns a uniform integer in [0, n).
func boundedDraw(src *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		threshold := -n % n
		for lo < threshold {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}
