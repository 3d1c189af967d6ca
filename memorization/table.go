package memorization

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/memtrain/memtrain/internal/units"
)

// WriteTable prints a summary as a short text table: per prefix length,
// members and non-members side by side, rates in percent as the study
// report writes them, then the membership-inference AUCs.
func WriteTable(w io.Writer, s *Summary) error {
	fmt.Fprintf(w, "%s: %d documents (%d members, %d non-members), %d skipped as too short",
		s.Protocol, s.Documents, s.Members, s.NonMembers, s.Skipped)
	if s.Name == "chat" {
		fmt.Fprintf(w, "; %d answers too short for a probe; a probe per answer", s.SkippedAnswers)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "prefix\tgroup\tdocs\texact match %\ttoken match %\tROUGE-L tokens %\tROUGE-L words %\tloss\tperplexity\t")
	eachGroup(s, func(k, name string, g *Group) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.3f\t%s\t\n", k, name, g.Documents,
			percent(g.Exact), percent(g.TokenMatch), percent(g.RougeLTokens), percent(g.RougeLWords),
			g.Loss.Mean, units.FormatPerplexity(g.Perplexity))
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	if sc := s.Sampling; sc != nil {
		fmt.Fprintf(w, "\nprobabilistic extraction: %d samples a document at temperature %g, top-k %s, seed %d\n",
			sc.Samples, sc.Temperature, topKText(sc.TopK), sc.Seed)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "prefix\tgroup\tdocs\tgreedy exact match %\textracted by a sample %\textraction probability %\t")
		eachGroup(s, func(k, name string, g *Group) {
			if g.Sampled != nil {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t\n", k, name, g.Documents,
					percent(g.Exact), percent(g.Sampled.Extracted), percent(g.Sampled.Probability))
			}
		})
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if s.Members > 0 && s.NonMembers > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "membership inference\tROC AUC\tTPR at 1% FPR %\tTPR at 0.1% FPR %\t")
		for _, a := range MIAAttacks(&s.MIA) {
			fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%.1f\t\n", a.Name, a.AUC, 100*a.TPR1, 100*a.TPR01)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if n := scoredNonMembers(s); n < 1000 {
			fmt.Fprintf(w, "(%d non-members: %d false positives allowed at 1%% FPR, none at 0.1%%)\n", n, int(math.Floor(FPR1*float64(n)+1e-9)))
		}
	}
	return nil
}

// scoredNonMembers is the number of non-members the attacks scored (those
// not skipped), which a summary does not record: its largest group of
// non-members holds them all.
func scoredNonMembers(s *Summary) int {
	scored := 0
	for _, p := range s.Prefixes {
		scored = max(scored, p.NonMembers.Documents)
	}
	return scored
}

// An Attack is one membership-inference score's results.
type Attack struct {
	Name             string
	AUC, TPR1, TPR01 float64
}

// MIAAttacks lists the attacks of m that were measured, in the order the
// table and the study report print them: loss, zlib (with decoded words),
// min-k% and the reference model's.
func MIAAttacks(m *MIA) []Attack {
	out := []Attack{{"loss", m.LossAUC, m.LossTPR1, m.LossTPR01}}
	if m.ZlibAUC != 0 {
		out = append(out, Attack{"zlib", m.ZlibAUC, m.ZlibTPR1, m.ZlibTPR01})
	}
	out = append(out, Attack{fmt.Sprintf("min-%g%% prob", m.MinKPercent), m.MinKAUC, m.MinKTPR1, m.MinKTPR01})
	if m.Reference {
		out = append(out, Attack{"reference (loss − reference loss)", m.RefAUC, m.RefTPR1, m.RefTPR01})
	}
	return out
}

func percent(iv Interval) string {
	return fmt.Sprintf("%.1f [%.1f, %.1f]", 100*iv.Mean, 100*iv.Lo, 100*iv.Hi)
}

func topKText(k int) string {
	if k == 0 {
		return "0 (the whole vocabulary)"
	}
	return fmt.Sprint(k)
}

// eachGroup calls f for the members and the non-members of each prefix
// length that have documents, with the prefix column's text: the length
// ("rest" for the goldfish protocol, "prompt+P" for the chat protocol's
// conversation up to the answer and P answer tokens) on a prefix's first
// row, blank after.
func eachGroup(s *Summary, f func(k, name string, g *Group)) {
	for _, p := range s.Prefixes {
		k := fmt.Sprint(p.K)
		switch s.Name {
		case "goldfish":
			k = "rest"
		case "chat":
			k = fmt.Sprintf("prompt+%d", p.K)
		}
		for _, g := range []struct {
			name string
			g    *Group
		}{{"members", &p.Members}, {"non-members", &p.NonMembers}} {
			if g.g.Documents == 0 {
				continue
			}
			f(k, g.name, g.g)
			k = ""
		}
	}
}
