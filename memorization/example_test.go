package memorization_test

import (
	"fmt"

	"github.com/memtrain/memtrain/memorization"
)

// A protocol cuts a document into the prompt and the continuation a model
// must reproduce; the metrics compare the model's greedy continuation with
// it.
func ExampleProtocol_Probes() {
	ids := []int32{1, 10, 11, 12, 13, 14, 15, 16, 17}
	for _, p := range []memorization.Protocol{memorization.Pythia(4, 3), memorization.Carlini([]int{2, 5}, 3)} {
		for _, pr := range p.Probes(0, ids) {
			fmt.Printf("%s: prefix %v, suffix %v\n", p.Name, pr.Prefix, pr.Suffix)
		}
	}
	// Output:
	// pythia: prefix [1 10 11 12], suffix [13 14 15]
	// carlini: prefix [1 10], suffix [11 12 13]
	// carlini: prefix [1 10 11 12 13], suffix [14 15 16]
}

// Summarize aggregates per-document results, members against
// non-members, with seeded bootstrap intervals.
func ExampleSummarize() {
	p := memorization.Pythia(4, 3)
	results := []memorization.DocResult{
		{Doc: 0, Member: true, Loss: 0.1, Probes: []memorization.Result{{K: 4, Exact: true, TokenMatch: 1}}},
		{Doc: 1, Member: true, Loss: 0.2, Probes: []memorization.Result{{K: 4, Exact: true, TokenMatch: 1}}},
		{Doc: 2, Member: true, Loss: 0.9, Probes: []memorization.Result{{K: 4, TokenMatch: 1.0 / 3}}},
		{Doc: 3, Member: false, Loss: 3.0, Probes: []memorization.Result{{K: 4}}},
		{Doc: 4, Member: false, Loss: 2.5, Probes: []memorization.Result{{K: 4, TokenMatch: 1.0 / 3}}},
	}
	s := memorization.Summarize(results, p, 20, memorization.Bootstrap{Resamples: 1000, Seed: 1, Level: 0.95}, false)
	g := s.Prefixes[0]
	fmt.Printf("members: exact match %.3f, token match %.3f\n", g.Members.Exact.Mean, g.Members.TokenMatch.Mean)
	fmt.Printf("non-members: exact match %.3f\n", g.NonMembers.Exact.Mean)
	fmt.Printf("loss AUC %.2f\n", s.MIA.LossAUC)
	// Output:
	// members: exact match 0.667, token match 0.778
	// non-members: exact match 0.000
	// loss AUC 1.00
}
