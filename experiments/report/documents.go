package report

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"strconv"

	"github.com/memtrain/memtrain/memorization"
)

// DocumentsFile is the report's per-target table: every document's
// outcome in every evaluation, beside results.csv.
const DocumentsFile = "documents.csv"

// evalDocs are the per-document results (docs.jsonl) of every finished
// run's evaluations, read once for the report's figures and tables: by run,
// then protocol key.
type evalDocs map[*ArmResult]map[string][]memorization.DocResult

// readEvalDocs reads the docs.jsonl of every evaluation of the arms' runs.
// One that is missing or unreadable is a warning: what it would give (its
// documents' rows, its share of the distributions) is left out.
func readEvalDocs(dir string, arms []*reportArm, protos []*reportProtocol, warnings *[]string) evalDocs {
	out := evalDocs{}
	for _, a := range arms {
		for _, r := range a.runs {
			for _, p := range protos {
				e := r.Eval(p.Key)
				if e == nil {
					continue
				}
				docs, err := r.Docs(dir, e)
				if err != nil {
					*warnings = append(*warnings, fmt.Sprintf("%s, %s: no per-document results (%v); left out of the per-document figures and tables and %s", r.Name(), p.Key, err, DocumentsFile))
					continue
				}
				if out[r] == nil {
					out[r] = map[string][]memorization.DocResult{}
				}
				out[r][p.Key] = docs
			}
		}
	}
	return out
}

// of returns run r's documents of protocol key (nil when not read).
func (d evalDocs) of(r *ArmResult, key string) []memorization.DocResult { return d[r][key] }

// documentsHeader names documents.csv's columns: one row per arm × seed ×
// protocol × document × probe (prefix length), in the report's arm order.
// Match rates are fractions in [0, 1] (exact_match 0 or 1), losses nats per
// token; an empty cell is a number that was not measured (rougeL_words and
// zlib without decoded words, ref_* without a reference model, samples and
// extraction_prob without sampling, repetitions outside a canary study: a canary target's copies in the
// training data).
var documentsHeader = []string{
	"arm", "seed", "loss", "k", "protocol", "doc", "member", "repetitions", "source", "line", "tokens", "skipped",
	"prefix_len", "suffix_len", "exact_match", "token_match", "rougeL_tokens", "rougeL_words", "prefix_match",
	"doc_loss", "zlib", "min_k", "ref_loss", "ref_score", "samples", "sample_hits", "extraction_prob",
}

// renderDocuments writes documents.csv. A document skipped as too short
// for the protocol has one row, with its reason and no probe cells.
func renderDocuments(arms []*reportArm, protos []*reportProtocol, docs evalDocs) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write(documentsHeader); err != nil {
		return nil, err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	itoa := strconv.Itoa
	for _, a := range arms {
		for _, r := range a.runs {
			for _, p := range protos {
				e := r.Eval(p.Key)
				if e == nil {
					continue
				}
				words := summaryHasWords(&e.Summary)
				for _, d := range docs.of(r, p.Key) {
					reps := ""
					if n, ok := r.repetitions(d); ok {
						reps = itoa(n)
					}
					doc := []string{r.Arm, strconv.FormatUint(r.Seed, 10), r.Loss, itoa(r.K), p.Key, itoa(d.Doc),
						strconv.FormatBool(d.Member), reps, d.Source, strconv.FormatInt(d.Line, 10), itoa(d.Tokens), d.Skipped}
					scores := []string{"", "", "", "", ""}
					if d.Skipped == "" {
						scores = []string{f(d.Loss), "", f(d.MinK), "", ""}
						if words {
							scores[1] = f(d.Zlib)
						}
						if d.RefLoss != nil {
							scores[3], scores[4] = f(*d.RefLoss), f(memorization.RefScore(d.Loss, *d.RefLoss))
						}
					}
					if len(d.Probes) == 0 {
						row := append(append(doc, make([]string, 7)...), scores...)
						if err := w.Write(append(row, "", "", "")); err != nil {
							return nil, err
						}
						continue
					}
					for _, pr := range d.Probes {
						exact := "0"
						if pr.Exact {
							exact = "1"
						}
						rw := ""
						if words {
							rw = f(pr.RougeLText)
						}
						row := append(append([]string(nil), doc...), itoa(pr.K), itoa(len(pr.Suffix)), exact, f(pr.TokenMatch),
							f(pr.RougeLIDs), rw, itoa(pr.PrefixMatch))
						row = append(row, scores...)
						if pr.Samples > 0 {
							row = append(row, itoa(pr.Samples), itoa(pr.SampleHits), f(pr.ExtractionProb()))
						} else {
							row = append(row, "", "", "")
						}
						if err := w.Write(row); err != nil {
							return nil, err
						}
					}
				}
			}
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}
