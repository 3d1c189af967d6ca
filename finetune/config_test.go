package finetune

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/goldfish"
	"github.com/memtrain/memtrain/internal/options"
)

// TestDefaultConfig: the declared defaults are the documented ones.
func TestDefaultConfig(t *testing.T) {
	want := Config{
		Loss:       Standard,
		Goldfish:   goldfish.Config{Strategy: goldfish.HashTable, K: 4, H: 13},
		Optimizer:  OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Moments: "fp32"},
		Schedule:   Schedule{Kind: "cosine", LR: 1e-4, MinLR: 1e-5},
		BatchSize:  8,
		MicroBatch: 4,
		Epochs:     1,
		Clip:       1.0,
		Keep:       2,
		SaveDType:  "f32",
		Precision:  "f32",
		Master:     "fp32",
		Divergence: Divergence{Factor: 4, Margin: 1, Window: 50},
		Samples:    Samples{MaxNewTokens: 32},
		Extraction: Extraction{Protocol: "goldfish", Batch: 8},
		LoRA:       LoRA{Targets: "q_proj,k_proj,v_proj,o_proj", BaseDType: "auto"},
	}
	if got := DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultConfig() = %+v, want %+v", got, want)
	}
}

// TestResumeHash: the settings a resumed run must share change the hash;
// the others do not.
func TestResumeHash(t *testing.T) {
	base := DefaultConfig()
	h := base.resumeHash()
	for name, change := range map[string]func(*Config){
		"model": func(c *Config) { c.Model = "other" }, "data": func(c *Config) { c.Data = "other" },
		"loss": func(c *Config) { c.Loss = Goldfish }, "goldfish.k": func(c *Config) { c.Goldfish.K = 3 },
		"batch_size": func(c *Config) { c.BatchSize = 16 }, "seed": func(c *Config) { c.Seed = 9 },
		"optimizer.name": func(c *Config) { c.Optimizer.Name = "sgd" }, "schedule.kind": func(c *Config) { c.Schedule.Kind = "linear" },
		"max_steps": func(c *Config) { c.MaxSteps = 5 },
	} {
		c := base
		change(&c)
		if c.resumeHash() == h {
			t.Errorf("changing %s kept the resume hash", name)
		}
	}
	for name, change := range map[string]func(*Config){
		"out": func(c *Config) { c.Out = "elsewhere" }, "micro_batch": func(c *Config) { c.MicroBatch = 2 },
		"schedule.lr": func(c *Config) { c.Schedule.LR = 1 }, "keep": func(c *Config) { c.Keep = 9 },
		"divergence.factor": func(c *Config) { c.Divergence.Factor = 0 },
	} {
		c := base
		change(&c)
		if c.resumeHash() != h {
			t.Errorf("changing %s changed the resume hash", name)
		}
	}
}

// TestValidateDivergence: the watch is off (factor 0) or has a factor of
// at least 1, a margin of at least 0 and a window of at least one step.
func TestValidateDivergence(t *testing.T) {
	for _, tc := range []struct {
		d  Divergence
		ok bool
	}{
		{Divergence{Factor: 4, Margin: 1, Window: 50}, true},
		{Divergence{}, true},
		{Divergence{Factor: 1, Margin: 0, Window: 1}, true},
		{Divergence{Factor: 0.5, Margin: 1, Window: 50}, false},
		{Divergence{Factor: -1, Margin: 1, Window: 50}, false},
		{Divergence{Factor: math.NaN(), Margin: 1, Window: 50}, false},
		{Divergence{Factor: 4, Margin: -1, Window: 50}, false},
		{Divergence{Factor: 4, Margin: math.Inf(1), Window: 50}, false},
		{Divergence{Factor: 4, Margin: 1, Window: 0}, false},
	} {
		c := DefaultConfig()
		c.Model, c.Data, c.Out = "m", "d", "o"
		c.Divergence = tc.d
		err := c.Validate()
		if (err == nil) != tc.ok || err != nil && !strings.HasPrefix(err.Error(), "finetune: divergence") {
			t.Errorf("%+v: %v", tc.d, err)
		}
	}
}

// TestValidateSamples: samples every N steps need prompts, none of them
// empty.
func TestValidateSamples(t *testing.T) {
	for _, tc := range []struct {
		s  Samples
		ok bool
	}{
		{Samples{MaxNewTokens: 32}, true},
		{Samples{Every: 5, Prompts: []string{"Once"}, MaxNewTokens: 32}, true},
		{Samples{Every: 5, MaxNewTokens: 32}, false},
		{Samples{Every: 5, Prompts: []string{"Once", ""}, MaxNewTokens: 32}, false},
	} {
		c := DefaultConfig()
		c.Model, c.Data, c.Out = "m", "d", "o"
		c.Samples = tc.s
		err := c.Validate()
		if (err == nil) != tc.ok || err != nil && !strings.HasPrefix(err.Error(), "finetune: samples") {
			t.Errorf("%+v: %v", tc.s, err)
		}
	}
}

// TestValidateNumbers: every float of the configuration refuses NaN and
// the infinities, every integer a negative value, naming the key; flags
// and files set them alike.
func TestValidateNumbers(t *testing.T) {
	type tc struct{ flag, value, want string }
	cases := []tc{
		{"max-steps", "-3", "finetune: max_steps: -3 (want 0 or more)"},
		{"clip", "NaN", "finetune: clip: NaN (want a finite number)"},
		{"schedule.min-lr", "NaN", "finetune: schedule.min_lr: NaN (want a finite number)"},
		{"optimizer.eps", "+Inf", "finetune: optimizer.eps: +Inf (want a finite number)"},
		{"schedule.total", "-1", "finetune: schedule.total: -1 (want 0 or more)"},
	}
	// And every numeric key, as it is declared.
	for _, f := range options.Fields(&Config{}) {
		if f.Type.PkgPath() != "" {
			continue // an enumeration (goldfish.strategy), set by name
		}
		switch f.Type.Kind() {
		case reflect.Float64:
			for _, v := range []string{"NaN", "+Inf", "-Inf"} {
				cases = append(cases, tc{f.Flag(), v, "finetune: " + f.Key + ": " + v + " (want a finite number)"})
			}
		case reflect.Int:
			cases = append(cases, tc{f.Flag(), "-1", "finetune: " + f.Key + ": -1"})
		}
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		cfg.Model, cfg.Data, cfg.Out = "m", "d", "o"
		if err := cfg.Validate(); err != nil {
			t.Fatalf("the base configuration: %v", err)
		}
		fl := pflag.NewFlagSet("finetune", pflag.ContinueOnError)
		options.Bind(fl, &cfg)
		if err := fl.Parse([]string{"--" + c.flag, c.value}); err != nil {
			t.Fatalf("--%s %s: %v", c.flag, c.value, err)
		}
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("--%s %s: %v, want %q", c.flag, c.value, err, c.want)
		}
	}
}

// TestMetricsWithoutLoss: a step with no kept target has no loss; its
// line is still written, with null.
func TestMetricsWithoutLoss(t *testing.T) {
	b, err := json.Marshal(Metrics{Schema: 1, Step: 3, Loss: math.NaN(), LossAll: 2.5, Kept: 0, Targets: 8})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if v, ok := back["loss"]; !ok || v != nil || back["loss_all"] != 2.5 || back["step"] != 3.0 || back["targets"] != 8.0 {
		t.Errorf("line %s", b)
	}
}

// TestRecomputeKey: the recompute key takes none, selective and full, and
// true and false as when it was a switch (a run's config.yaml of then
// resumes as it was), in a file and as a flag, whose bare form is full;
// anything else is refused. The run's model takes the mode.
func TestRecomputeKey(t *testing.T) {
	for _, c := range []struct {
		value string
		want  Recompute
	}{
		{"none", RecomputeNone}, {"selective", RecomputeSelective}, {"full", RecomputeFull},
		{"true", RecomputeFull}, {"false", RecomputeNone},
	} {
		cfg := DefaultConfig()
		if err := options.Decode("run.yaml", []byte("recompute: "+c.value+"\n"), &cfg); err != nil || cfg.Recompute != c.want {
			t.Errorf("recompute: %s in a file: %v, %v; want %v", c.value, cfg.Recompute, err, c.want)
		}
		cfg = DefaultConfig()
		fl := pflag.NewFlagSet("finetune", pflag.ContinueOnError)
		options.Bind(fl, &cfg)
		if err := fl.Parse([]string{"--recompute=" + c.value}); err != nil || cfg.Recompute != c.want {
			t.Errorf("--recompute=%s: %v, %v; want %v", c.value, cfg.Recompute, err, c.want)
		}
		if opt, err := cfg.ModelOptions(&checkpoints.Config{}); err != nil || opt.Recompute != llama.Recompute(c.want) {
			t.Errorf("--recompute=%s: the model's %v, %v", c.value, opt.Recompute, err)
		}
	}
	cfg := DefaultConfig()
	if cfg.Recompute != RecomputeNone {
		t.Errorf("default %v, want none", cfg.Recompute)
	}
	fl := pflag.NewFlagSet("finetune", pflag.ContinueOnError)
	options.Bind(fl, &cfg)
	if err := fl.Parse([]string{"--recompute", "--seed", "3"}); err != nil || cfg.Recompute != RecomputeFull || cfg.Seed != 3 {
		t.Errorf("--recompute alone: %v, %v; want full", cfg.Recompute, err)
	}
	for _, bad := range []string{"yes", "2", "Selective"} {
		cfg := DefaultConfig()
		if err := options.Decode("run.yaml", []byte("recompute: "+bad+"\n"), &cfg); err == nil || !strings.Contains(err.Error(), "want none, selective or full") {
			t.Errorf("recompute: %s: %v", bad, err)
		}
	}
	if b, err := yaml.Marshal(map[string]Recompute{"recompute": RecomputeSelective}); err != nil || string(b) != "recompute: selective\n" {
		t.Errorf("written as %q, %v", b, err)
	}
}
