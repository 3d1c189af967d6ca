package memorization

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/memtrain/memtrain/internal/units"
)

// WriteTable prints a summary as a short text table: per prefix length,
// members and non-members side by side, rates in percent as the study
// report writes them, then the membership-inference AUCs.
func WriteTable(w io.Writer, s *Summary) error {
	fmt.Fprintf(w, "%s: %d documents (%d members, %d non-members), %d skipped as too short\n",
		s.Protocol, s.Documents, s.Members, s.NonMembers, s.Skipped)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "prefix\tgroup\tdocs\texact match %\ttoken match %\tROUGE-L tokens %\tROUGE-L words %\tloss\tperplexity\t")
	for _, p := range s.Prefixes {
		k := fmt.Sprint(p.K)
		if s.Name == "goldfish" {
			k = "rest"
		}
		for _, g := range []struct {
			name string
			g    Group
		}{{"members", p.Members}, {"non-members", p.NonMembers}} {
			if g.g.Documents == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.3f\t%s\t\n", k, g.name, g.g.Documents,
				percent(g.g.Exact), percent(g.g.TokenMatch), percent(g.g.RougeLTokens), percent(g.g.RougeLWords),
				g.g.Loss.Mean, units.FormatPerplexity(g.g.Perplexity))
			k = ""
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Members > 0 && s.NonMembers > 0 {
		fmt.Fprintf(w, "membership inference ROC AUC: loss %.3f, zlib %.3f, min-%g%% prob %.3f\n",
			s.MIA.LossAUC, s.MIA.ZlibAUC, s.MIA.MinKPercent, s.MIA.MinKAUC)
	}
	return nil
}

func percent(iv Interval) string {
	return fmt.Sprintf("%.1f [%.1f, %.1f]", 100*iv.Mean, 100*iv.Lo, 100*iv.Hi)
}
