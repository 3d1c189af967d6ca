package memorization

import (
	"bytes"
	"compress/zlib"
	"math"
	"sort"
	"strings"
	"unicode"
)

// ExactMatch reports whether pred reproduces truth exactly: both sequences
// have the same length and agree at every position. Two empty sequences
// match.
func ExactMatch(pred, truth []int32) bool {
	if len(pred) != len(truth) {
		return false
	}
	for i := range truth {
		if pred[i] != truth[i] {
			return false
		}
	}
	return true
}

// TokenMatch returns the fraction of positions i < len(truth) at which
// pred[i] == truth[i]. Positions beyond the end of a shorter pred count as
// wrong, and tokens of pred beyond len(truth) are ignored. An empty truth
// yields 0.
func TokenMatch(pred, truth []int32) float64 {
	if len(truth) == 0 {
		return 0
	}
	n := min(len(pred), len(truth))
	hits := 0
	for i := 0; i < n; i++ {
		if pred[i] == truth[i] {
			hits++
		}
	}
	return float64(hits) / float64(len(truth))
}

// PrefixMatch returns the length of the longest common prefix of pred and
// truth, that is the number of leading positions at which they agree.
func PrefixMatch(pred, truth []int32) int {
	n := min(len(pred), len(truth))
	for i := 0; i < n; i++ {
		if pred[i] != truth[i] {
			return i
		}
	}
	return n
}

// lcsLen returns the length of the longest common subsequence of a and b,
// using O(len(a)·len(b)) time and two rows of O(min(len(a), len(b))) memory.
func lcsLen[T comparable](a, b []T) int {
	if len(b) > len(a) {
		a, b = b, a
	}
	if len(b) == 0 {
		return 0
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			switch {
			case a[i] == b[j]:
				cur[j+1] = prev[j] + 1
			case prev[j+1] >= cur[j]:
				cur[j+1] = prev[j+1]
			default:
				cur[j+1] = cur[j]
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// rougeL computes ROUGE-L as Google's rouge_score package does: with L the
// length of the longest common subsequence, precision = L/len(pred),
// recall = L/len(truth) and F1 = 2PR/(P+R). If either sequence is empty all
// three are 0, and F1 is 0 when P+R is 0, so the result is never NaN.
func rougeL[T comparable](pred, truth []T) (precision, recall, f1 float64) {
	if len(pred) == 0 || len(truth) == 0 {
		return 0, 0, 0
	}
	l := lcsLen(pred, truth)
	precision = float64(l) / float64(len(pred))
	recall = float64(l) / float64(len(truth))
	if precision+recall > 0 {
		f1 = 2 * precision * recall / (precision + recall)
	}
	return precision, recall, f1
}

// RougeL returns the LCS-based ROUGE-L precision, recall and F1 of the
// prediction tokens pred against the reference tokens truth, computed as
// rouge_score's rouge_scorer (rougeL, not rougeLsum) does: with L the length
// of the longest common subsequence, precision = L/len(pred),
// recall = L/len(truth) and F1 = 2PR/(P+R). When either sequence is empty,
// or they share no token, all three results are 0 (never NaN).
func RougeL(pred, truth []string) (precision, recall, f1 float64) {
	return rougeL(pred, truth)
}

// RougeLIDs is [RougeL] over token ids.
func RougeLIDs(pred, truth []int32) (precision, recall, f1 float64) {
	return rougeL(pred, truth)
}

// RougeLText is [RougeL] over the words of pred and truth as split by
// [RougeTokenize], which reproduces rouge_score's default tokenizer without
// stemming.
func RougeLText(pred, truth string) (precision, recall, f1 float64) {
	return rougeL(RougeTokenize(pred), RougeTokenize(truth))
}

// RougeTokenize splits text into words the way rouge_score's default
// tokenizer (tokenize.tokenize with stemming off) does: the text is
// lower-cased, every maximal run of characters outside [a-z0-9] is replaced
// by a space, and the result is split on whitespace. Non-ASCII letters
// therefore act as separators, as they do in rouge_score. Lower-casing
// follows Python's str.lower for every character whose lower case is in
// [a-z0-9], including the Kelvin sign (to "k") and U+0130 (to "i" plus a
// combining dot, which splits the word).
func RougeTokenize(text string) []string {
	var b strings.Builder
	b.Grow(len(text))
	for _, r := range text {
		if r == '\u0130' {
			// Python lower-cases İ to "i" plus U+0307 COMBINING DOT ABOVE,
			// and the combining dot then acts as a separator.
			b.WriteString("i ")
			continue
		}
		r = unicode.ToLower(r)
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte(' ')
		}
	}
	return strings.Fields(b.String())
}

// ZlibLen returns the length in bytes of the zlib compression (default
// level) of text's UTF-8 bytes, the "zlib entropy" of Carlini et al. (2021).
// Go's compressor may produce a stream a few bytes longer or shorter than
// CPython's zlib.compress for the same input.
func ZlibLen(text string) int {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	// Writes to a bytes.Buffer cannot fail.
	_, _ = w.Write([]byte(text))
	_ = w.Close()
	return buf.Len()
}

// ZlibRatio returns the "zlib" membership-inference score of Carlini et al.,
// "Extracting Training Data from Large Language Models" (2021): the
// log-perplexity of the text divided by its zlib entropy,
//
//	loss / ZlibLen(text)
//
// where loss is the model's mean per-token negative log-likelihood of the
// text in nats (the log of its perplexity) and ZlibLen is the length in bytes
// of the zlib-compressed UTF-8 text. Lower scores suggest memorization: the
// model finds the text easier than its compressibility explains. The
// denominator is never zero, since even an empty text compresses to a
// non-empty zlib stream.
func ZlibRatio(loss float64, text string) float64 {
	return loss / float64(ZlibLen(text))
}

// MinKProb returns the Min-K% Prob membership-inference score of Shi et al.,
// "Detecting Pretraining Data from Large Language Models" (2023): the mean of
// the lowest k percent of the per-token log-probabilities tokenLogProbs
// (k = 20 selects the lowest 20%). The number of tokens averaged is
// floor(len·k/100), clamped to at least one and at most len, so k ≤ 0 uses the
// single least likely token and k ≥ 100 averages all of them. Higher scores
// (closer to 0) suggest membership; the authors' reference code reports the
// negation of this value, for which lower suggests membership. It returns 0 for an empty input and does
// not modify tokenLogProbs.
func MinKProb(tokenLogProbs []float64, k float64) float64 {
	n := len(tokenLogProbs)
	if n == 0 {
		return 0
	}
	count := n
	if k < 100 {
		// The small slack keeps e.g. 10·30/100 from flooring to 2 through
		// rounding error.
		count = int(math.Floor(float64(n)*k/100 + 1e-9))
	}
	count = max(1, min(count, n))
	sorted := append([]float64(nil), tokenLogProbs...)
	sort.Float64s(sorted)
	sum := 0.0
	for _, v := range sorted[:count] {
		sum += v
	}
	return sum / float64(count)
}
