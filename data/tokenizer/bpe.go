package tokenizer

import (
	"bytes"
	"math"
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
	return append(dst, ids...)
}

// initialSymbols splits w into characters and maps them to tokens, with
// byte fallback and unknown-token handling as HF's BPE::merge_word. The
// result is in st.ids.
func (m *bpe) initialSymbols(st *encState, w []byte) []int32 {
	ids := st.ids[:0]
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

// mergeLarge applies the merges to ids like mergeSmall, in O(n log n), with
// a doubly linked list of symbols and a priority queue of candidate merges,
// as HF's Word::merge_all.
func (m *bpe) mergeLarge(st *encState, ids []int32) []int32 {
	n := len(ids)
	prev := growInt32(st.prev, n)
	next := growInt32(st.next, n)
	for k := range n {
		prev[k] = int32(k - 1)
		next[k] = int32(k + 1)
	}
	next[n-1] = -1
	h := st.heap[:0]
	for k := 0; k+1 < n; k++ {
		if mg := m.mergeOf(ids[k], ids[k+1]); mg.id >= 0 {
			h = append(h, candidate{mg.rank, int32(k), mg.id})
		}
	}
	h.init()
	for len(h) > 0 {
		top := h.pop()
		pos := top.pos
		if ids[pos] < 0 || next[pos] < 0 {
			continue // removed, or the last symbol
		}
		right := next[pos]
		if m.mergeOf(ids[pos], ids[right]).id != top.id {
			continue // stale
		}
		ids[pos] = top.id
		ids[right] = -1
		next[pos] = next[right]
		if nr := next[right]; nr >= 0 {
			prev[nr] = pos
		}
		if p := prev[pos]; p >= 0 {
			if mg := m.mergeOf(ids[p], ids[pos]); mg.id >= 0 {
				h.push(candidate{mg.rank, p, mg.id})
			}
		}
		if nx := next[pos]; nx >= 0 {
			if mg := m.mergeOf(ids[pos], ids[nx]); mg.id >= 0 {
				h.push(candidate{mg.rank, pos, mg.id})
			}
		}
	}
	st.prev, st.next, st.heap = prev, next, h
	out := ids[:0]
	for _, id := range ids {
		if id >= 0 {
			out = append(out, id)
		}
	}
	return out
}

func growInt32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// candidate is a possible merge of the symbol at pos with the next one.
type candidate struct {
	rank int32
	pos  int32
	id   int32
}

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// candidates is a binary min-heap ordered by (rank, pos).
type candidates []candidate

func (h candidates) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *candidates) push(c candidate) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *candidates) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	h.down(0)
	return top
}

func (h candidates) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			j = r
		}
		if !h[j].less(h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}
