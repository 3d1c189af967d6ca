package tokenizer

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// bpe is a byte-pair-encoding model as HF tokenizers' models::bpe::BPE,
// without dropout.
type bpe struct {
	vocab  map[string]int32
	merges map[uint64]merge // by pairKey(left, right)

	unk          int32 // -1: none
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix

	// splitBefore, if not empty, is a character (SentencePiece's "▁") that
	// no token has after another character. Merges then never cross the
	// start of a run of it, so a word can be encoded in chunks that begin
	// there, each cached, with the tokens of the whole word.
	splitBefore string

	// Fast lookups of single-character tokens (-1: not in the vocabulary).
	byteIDs     [utf8.RuneSelf]int32 // ASCII characters
	runeIDs     []int32              // characters below len(runeIDs)
	fallbackIDs [256]int32           // the <0xXX> byte-fallback tokens
}

// merge is the result of merging a pair of tokens: the merge's rank (its
// position in the merges list; lower merges first) and the merged token.
type merge struct {
	rank int32
	id   int32
}

var noMerge = merge{rank: math.MaxInt32, id: -1}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

func (m *bpe) mergeOf(left, right int32) merge {
	if mg, ok := m.merges[pairKey(left, right)]; ok {
		return mg
	}
	return noMerge
}

// initLookups fills the single-character lookup tables from the vocabulary.
func (m *bpe) initLookups() {
	for i := range m.byteIDs {
		m.byteIDs[i] = -1
	}
	m.runeIDs = make([]int32, 0x800) // all of the byte-level alphabet and more
	for i := range m.runeIDs {
		m.runeIDs[i] = -1
	}
	for i := range m.fallbackIDs {
		m.fallbackIDs[i] = -1
	}
	for tok, id := range m.vocab {
		r, n := utf8.DecodeRuneInString(tok)
		if n == 0 || n != len(tok) || r == utf8.RuneError && n == 1 {
			continue
		}
		if r < utf8.RuneSelf {
			m.byteIDs[r] = id
		}
		if int(r) < len(m.runeIDs) {
			m.runeIDs[r] = id
		}
	}
	if m.prefix == "" && m.suffix == "" && m.canSplitBefore("▁") {
		m.splitBefore = "▁"
	}
	if m.byteFallback {
		const hex = "0123456789ABCDEF"
		for b := range 256 {
			tok := []byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'}
			if id, ok := m.vocab[string(tok)]; ok {
				m.fallbackIDs[b] = id
			}
		}
	}
}

// canSplitBefore reports whether every occurrence of c in the vocabulary's
// tokens is at the start of a token or follows another c, so that no merge
// can join a character other than c with a following c.
func (m *bpe) canSplitBefore(c string) bool {
	if _, ok := m.vocab[c]; !ok {
		return false
	}
	for tok := range m.vocab {
		for k := 1; k < len(tok); k++ {
			i := strings.Index(tok[k:], c)
			if i < 0 {
				break
			}
			k += i
			if !strings.HasSuffix(tok[:k], c) {
				return false
			}
		}
	}
	return true
}

// maxCachedWord is the length in bytes from which words are not cached, as in HF.
const maxCachedWord = 256

// maxCacheEntries bounds each encoder state's cache of words.
const maxCacheEntries = 1 << 16

// encodeWord appends the tokens of one pre-tokenized word w to dst.
func (m *bpe) encodeWord(st *encState, dst []int32, w []byte) []int32 {
	if len(w) == 0 {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[string(w)]; ok {
			return append(dst, id)
		}
	}
	if m.splitBefore == "" {
		return m.encodeChunk(st, dst, w)
	}
	sep := m.splitBefore
	for len(w) > 0 {
		// The chunk ends before the next sep that follows another character.
		end := len(w)
		for k := 1; k < len(w); {
			i := bytes.Index(w[k:], []byte(sep))
			if i < 0 {
				break
			}
			k += i
			if !bytes.HasSuffix(w[:k], []byte(sep)) {
				end = k
				break
			}
			k += len(sep)
		}
		dst = m.encodeChunk(st, dst, w[:end])
		w = w[end:]
	}
	return dst
}

// encodeChunk appends the tokens of w, a word or a chunk of one, to dst,
// caching the result.
func (m *bpe) encodeChunk(st *encState, dst []int32, w []byte) []int32 {
	if len(w) >= maxCachedWord {
		return m.mergeWord(st, dst, w)
	}
	if sp, ok := st.cache[string(w)]; ok {
		return append(dst, st.arena[sp.off:sp.off+sp.n]...)
	}
	n := len(dst)
	dst = m.mergeWord(st, dst, w)
	if len(st.cache) >= maxCacheEntries {
		clear(st.cache)
		st.arena = st.arena[:0]
	}
	off := len(st.arena)
	st.arena = append(st.arena, dst[n:]...)
	st.cache[string(w)] = span{int32(off), int32(len(dst) - n)}
	return dst
}

// mergeWord appends the tokens of w to dst, as HF's BPE::merge_word.
func (m *bpe) mergeWord(st *encState, dst []int32, w []byte) []int32 {
	ids := m.initialSymbols(st, w)
	if len(ids) <= maxQuadraticWord {
		ids = m.mergeSmall(st, ids)
	} else {
		ids = m.mergeLarge(st, ids)
	}
	dst = append(dst, ids...)
	if cap(st.ids) > maxKeptSymbols {
		st.ids = nil // not held by a pooled state
	}
	return dst
}

// initialSymbols splits w into characters and maps them to tokens, with
// byte fallback and unknown-token handling as HF's BPE::merge_word. The
// result is in st.ids.
func (m *bpe) initialSymbols(st *encState, w []byte) []int32 {
	ids := st.ids[:0]
	if n := utf8.RuneCount(w); cap(ids) < n {
		// A symbol a character (byte fallback may add more), allocated
		// at once, as growing a long word's symbols would copy them over
		// and over.
		ids = make([]int32, 0, n)
	}
	pendingUnk := false
	for i := 0; i < len(w); {
		r, n := utf8.DecodeRune(w[i:])
		ch := w[i : i+n]
		first, last := i == 0, i+n == len(w)
		i += n
		id := int32(-1)
		var bytes []byte // the character as looked up, for byte fallback
		if m.prefix != "" && !first || m.suffix != "" && last {
			// Slow path: decorated characters.
			s := string(ch)
			if m.prefix != "" && !first {
				s = m.prefix + s
			}
			if m.suffix != "" && last {
				s += m.suffix
			}
			if v, ok := m.vocab[s]; ok {
				id = v
			}
			bytes = []byte(s)
		} else {
			switch {
			case n == 1 && r < utf8.RuneSelf:
				id = m.byteIDs[r]
			case r != utf8.RuneError && int(r) < len(m.runeIDs):
				id = m.runeIDs[r]
			default:
				if v, ok := m.vocab[string(ch)]; ok {
					id = v
				}
			}
			bytes = ch
		}
		if id >= 0 {
			if pendingUnk {
				ids = append(ids, m.unk)
				pendingUnk = false
			}
			ids = append(ids, id)
			continue
		}
		if m.byteFallback && m.hasFallback(bytes) {
			// As in HF, a pending unknown token is not flushed here.
			for _, b := range bytes {
				ids = append(ids, m.fallbackIDs[b])
			}
			continue
		}
		if m.unk >= 0 {
			if pendingUnk && !m.fuseUnk {
				ids = append(ids, m.unk)
			}
			pendingUnk = true
		}
		// Without an unknown token the character is dropped, as in HF.
	}
	if pendingUnk {
		ids = append(ids, m.unk)
	}
	st.ids = ids
	return ids
}

func (m *bpe) hasFallback(b []byte) bool {
	for _, c := range b {
		if m.fallbackIDs[c] < 0 {
			return false
		}
	}
	return true
}

// maxQuadraticWord is the number of symbols up to which mergeSmall is used.
const maxQuadraticWord = 48

// mergeSmall applies the merges to ids in place: while some adjacent pair
// has a merge, it merges the leftmost pair of lowest rank. This is what HF's
// Word::merge_all does with its priority queue ordered by (rank, position),
// at O(n²) cost, which is cheapest for short words.
func (m *bpe) mergeSmall(st *encState, ids []int32) []int32 {
	if len(ids) < 2 {
		return ids
	}
	pairs := st.pairs[:0]
	for k := 0; k+1 < len(ids); k++ {
		pairs = append(pairs, m.mergeOf(ids[k], ids[k+1]))
	}
	for {
		best := -1
		bestRank := int32(math.MaxInt32)
		for k, p := range pairs {
			if p.rank < bestRank {
				best, bestRank = k, p.rank
			}
		}
		if best < 0 {
			break
		}
		ids[best] = pairs[best].id
		ids = append(ids[:best+1], ids[best+2:]...)
		pairs = append(pairs[:best], pairs[best+1:]...)
		if best > 0 {
			pairs[best-1] = m.mergeOf(ids[best-1], ids[best])
		}
		if best < len(pairs) {
			pairs[best] = m.mergeOf(ids[best], ids[best+1])
		}
	}
	st.pairs = pairs
	return ids
}

// mergeLarge applies the merges to ids like mergeSmall, in O(n log n), as
// HF's Word::merge_all: a linked list of symbols over ids and a heap of
// candidate merges keyed by (rank, position), each a uint64. An entry is
// valid while the pair at its position still has its rank; stale entries
// are skipped when popped, and dropped when the heap is full. So a word of n
// symbols needs 8 bytes a symbol for the list and at most 10 for the heap,
// however long it is (a 100 MB word is one word to HF too). (HF keeps an
// entry while the pair merges into the same token, which is the same test
// unless the vocabulary gives two tokens one id; mergeSmall's is this one.)
//
// A symbol that starts at position s spans s to next[s]-1 of ids; the
// others of its span are dead, below 0. The last of a longer span holds
// -2-s, which leads from the following symbol back to s: the list needs no
// array of previous symbols.
func (m *bpe) mergeLarge(st *encState, ids []int32) []int32 {
	n := len(ids)
	next := growInt32(st.next, n)
	for k := range n {
		next[k] = int32(k + 1)
	}
	h := st.heap[:0]
	if limit := n + n/4; cap(h) < limit {
		h = make(mergeHeap, 0, limit)
	}
	for k := 0; k+1 < n; k++ {
		if mg := m.mergeOf(ids[k], ids[k+1]); mg.id >= 0 {
			h = append(h, heapKey(mg.rank, int32(k)))
		}
	}
	h.init()
	push := func(rank, pos int32) {
		if len(h) == cap(h) {
			h = m.dropStale(h, ids, next)
		}
		h.push(heapKey(rank, pos))
	}
	last := int32(n) // next of the last symbol
	for len(h) > 0 {
		rank, pos := h.pop()
		right := next[pos]
		if ids[pos] < 0 || right == last {
			continue // removed, or the last symbol
		}
		mg := m.mergeOf(ids[pos], ids[right])
		if mg.rank != rank {
			continue // stale
		}
		ids[pos] = mg.id
		end := next[right] - 1 // the last of the merged span
		ids[right] = -1
		ids[end] = -2 - pos
		next[pos] = next[right]
		if pos > 0 {
			p := pos - 1 // the previous symbol, or the last of its span
			if ids[p] < 0 {
				p = -2 - ids[p]
			}
			if mg := m.mergeOf(ids[p], ids[pos]); mg.id >= 0 {
				push(mg.rank, p)
			}
		}
		if nx := next[pos]; nx != last {
			if mg := m.mergeOf(ids[pos], ids[nx]); mg.id >= 0 {
				push(mg.rank, pos)
			}
		}
	}
	if n <= maxKeptSymbols {
		st.next, st.heap = next, h
	} else {
		st.next, st.heap = nil, nil // not held by a pooled state
	}
	out := ids[:0]
	for _, id := range ids {
		if id >= 0 {
			out = append(out, id)
		}
	}
	return out
}

// maxKeptSymbols bounds the scratch space, in symbols, that an encoder state
// keeps between words.
const maxKeptSymbols = 1 << 16

// dropStale removes the entries of a full heap whose pair no longer has
// their rank. A live symbol has one valid entry (or, with odd vocabularies,
// copies of it), so this frees at least the quarter of the heap that
// mergeLarge allows beyond the symbols, and does so a few times a word;
// should it free less, the heap grows instead.
func (m *bpe) dropStale(h mergeHeap, ids, next []int32) mergeHeap {
	kept := h[:0]
	for _, e := range h {
		rank, pos := e.split()
		if ids[pos] < 0 || int(next[pos]) == len(ids) || m.mergeOf(ids[pos], ids[next[pos]]).rank != rank {
			continue
		}
		kept = append(kept, e)
	}
	kept.init()
	if len(kept) > cap(kept)*3/4 {
		kept = slices.Grow(kept, cap(kept)/4)
	}
	return kept
}

func growInt32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// heapEntry is a candidate merge of the symbol at a position with the next
// one: the merge's rank in the high half, the position in the low half, so
// that entries order by rank and then position, as HF's.
type heapEntry uint64

func heapKey(rank, pos int32) heapEntry { return heapEntry(uint32(rank))<<32 | heapEntry(uint32(pos)) }

func (e heapEntry) split() (rank, pos int32) { return int32(e >> 32), int32(uint32(e)) }

// mergeHeap is a binary min-heap of candidate merges.
type mergeHeap []heapEntry

func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *mergeHeap) push(e heapEntry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[i] >= s[p] {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() (rank, pos int32) {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	h.down(0)
	return top.split()
}

func (h mergeHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h[r] < h[l] {
			j = r
		}
		if h[j] >= h[i] {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}
