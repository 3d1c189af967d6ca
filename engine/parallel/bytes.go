package parallel

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/engine"
)

// Bytes travel over the world's float32 collectives two to an element:
// every 16-bit value is exact in float32, and sums of one non-zero
// contribution stay exact.

func packBytes(dst []float32, b []byte) {
	dst[0] = float32(len(b) >> 16)
	dst[1] = float32(len(b) & 0xffff)
	for i := 0; i < len(b); i += 2 {
		v := uint32(b[i]) << 8
		if i+1 < len(b) {
			v |= uint32(b[i+1])
		}
		dst[2+i/2] = float32(v)
	}
}

func unpackBytes(src []float32) ([]byte, error) {
	n := int(src[0])<<16 | int(src[1])
	if n < 0 || (n+1)/2 > len(src)-2 {
		return nil, fmt.Errorf("parallel: a message of %d bytes in a buffer of %d", n, 2*(len(src)-2))
	}
	b := make([]byte, n)
	for i := 0; i < n; i += 2 {
		v := uint32(src[2+i/2])
		b[i] = byte(v >> 8)
		if i+1 < n {
			b[i+1] = byte(v)
		}
	}
	return b, nil
}

func packedLen(max int) int { return 2 + (max+1)/2 }

// Broadcast sends rank 0's b (at most max bytes) to every rank of the
// world and returns it; other ranks' b is ignored.
func (g *Grid) Broadcast(be engine.Backend, b []byte, max int) ([]byte, error) {
	if g.World.Size() == 1 {
		return b, nil
	}
	if g.Rank() == 0 && len(b) > max {
		return nil, fmt.Errorf("parallel: broadcast of %d bytes, at most %d", len(b), max)
	}
	host := make([]float32, packedLen(max))
	if g.Rank() == 0 {
		packBytes(host, b)
	}
	t := be.Alloc(engine.F32, len(host))
	defer be.Free(t)
	be.Upload(t, host)
	if err := g.World.Broadcast(t, 0); err != nil {
		return nil, fmt.Errorf("parallel: broadcast: %w", err)
	}
	be.Download(host, t)
	return unpackBytes(host)
}

// GatherBytes gives every rank of the world every rank's b (at most max
// bytes each), indexed by world rank.
func (g *Grid) GatherBytes(be engine.Backend, b []byte, max int) ([][]byte, error) {
	if len(b) > max {
		return nil, fmt.Errorf("parallel: gathering %d bytes, at most %d", len(b), max)
	}
	if g.World.Size() == 1 {
		return [][]byte{b}, nil
	}
	n, p := packedLen(max), g.World.Size()
	host := make([]float32, n)
	packBytes(host, b)
	src, dst := be.Alloc(engine.F32, n), be.Alloc(engine.F32, n*p)
	defer be.Free(src)
	defer be.Free(dst)
	be.Upload(src, host)
	if err := g.World.AllGather(dst, src); err != nil {
		return nil, fmt.Errorf("parallel: gathering: %w", err)
	}
	all := make([]float32, n*p)
	be.Download(all, dst)
	out := make([][]byte, p)
	for r := range p {
		var err error
		if out[r], err = unpackBytes(all[r*n : (r+1)*n]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// maxMessage bounds an error message that AgreeGather carries.
const maxMessage = 1000

// BroadcastFrom is Broadcast from the world rank root.
func (g *Grid) broadcastFrom(be engine.Backend, b []byte, max, root int) ([]byte, error) {
	if g.World.Size() == 1 {
		return b, nil
	}
	host := make([]float32, packedLen(max))
	if g.Rank() == root {
		packBytes(host, b[:min(len(b), max)])
	}
	t := be.Alloc(engine.F32, len(host))
	defer be.Free(t)
	be.Upload(t, host)
	if err := g.World.Broadcast(t, root); err != nil {
		return nil, fmt.Errorf("parallel: broadcast: %w", err)
	}
	be.Download(host, t)
	return unpackBytes(host)
}

// AgreeGather is Agree that also gathers: every rank passes its error and
// its data (at most limit bytes), and gets every rank's data by world
// rank when no rank failed. When one did, every rank fails with the first
// failing rank's error (by world rank): that rank with its own, the
// others with its message after the rank ("rank 3: …"). It is one
// all-gather over the world of limit bytes a rank (and, after a failure,
// a broadcast of the message), so that its buffers grow with the world
// by limit bytes a rank only.
func (g *Grid) AgreeGather(be engine.Backend, err error, data []byte, limit int) ([][]byte, error) {
	msg := append([]byte{0}, data...)
	if err != nil {
		msg = []byte{1}
	}
	all, gerr := g.GatherBytes(be, msg, 1+limit)
	if gerr != nil {
		return nil, errors.Join(err, gerr)
	}
	for r, m := range all {
		if len(m) == 0 || m[0] == 0 {
			continue
		}
		var text []byte
		if r == g.Rank() {
			text = []byte(err.Error())
		}
		text, berr := g.broadcastFrom(be, text, maxMessage, r)
		switch {
		case r == g.Rank():
			return nil, err
		case berr != nil:
			return nil, fmt.Errorf("rank %d failed (%v)", r, berr)
		}
		if len(text) == maxMessage {
			text = append(text, "…"...)
		}
		return nil, fmt.Errorf("rank %d: %s", r, text)
	}
	out := make([][]byte, len(all))
	for r, m := range all {
		out[r] = m[1:]
	}
	return out, nil
}

// FirstFailure tells every rank of the world the first rank (by world
// rank) that passed a non-nil msg, and that message (at most 1000
// bytes), or -1 when none did: an all-gather of a flag a rank, then a
// broadcast from that rank.
func (g *Grid) FirstFailure(be engine.Backend, msg []byte) (int, []byte, error) {
	flag := []byte{0}
	if msg != nil {
		flag[0] = 1
	}
	all, err := g.GatherBytes(be, flag, 1)
	if err != nil {
		return -1, nil, err
	}
	for r, f := range all {
		if len(f) == 1 && f[0] == 1 {
			text, err := g.broadcastFrom(be, msg, maxMessage, r)
			return r, text, err
		}
	}
	return -1, nil, nil
}
