package finetune

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
)

// Preflight checks a run before any rank starts and anything is
// allocated: the configuration, the batch against the dataset's train
// split, and what every rank of grid g (the zero Grid: one rank) with
// overlap ov will allocate — the model's shards, their gradients and
// optimizer moments, the training and evaluation workspaces, by the
// engine's own accounting (llama.Memory) — against what their devices
// have free (have, as engine/launch's Launcher.Memory reads it). A run
// that does not fit fails here in one line (an *engine.MemoryError: need,
// have, and the changes that would fit) rather than part-way through
// loading.
func Preflight(cfg Config, g comm.Grid, ov parallel.Overlap, have []engine.DeviceMemory) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	model, err := checkpoints.ReadConfig(cfg.Model)
	if err != nil {
		return err
	}
	store, err := data.OpenStore(cfg.Data)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := checkBatch(cfg, store); err != nil {
		return err
	}
	files, err := checkpoints.ReadTokenizerFiles(cfg.Model)
	if err != nil {
		return err
	}
	if err := checkDataFits(cfg, store, model, files); err != nil {
		return err
	}
	w, err := work(cfg, model, store, g, ov)
	if err != nil {
		return err
	}
	if err := llama.Preflight(model, w, have); err != nil {
		return fmt.Errorf("finetune: %s: %w", cfg.Model, err)
	}
	return nil
}

// checkDataFits refuses a dataset the model cannot take: tokens of another
// tokenizer than the model's (its files, when it carries them), more token
// ids than its vocabulary, longer sequences than its positions. The
// preflight runs it before a run folder is made, the run again on what it
// opened.
func checkDataFits(cfg Config, store *data.Store, model *checkpoints.Config, files map[string][]byte) error {
	man := store.Manifest()
	if tj, ok := files[tokenizer.FileName]; ok {
		sum := sha256.Sum256(tj)
		if got := hex.EncodeToString(sum[:]); got != man.Tokenizer.SHA256 {
			return fmt.Errorf("finetune: %s was tokenized with another tokenizer than %s's (tokenizer hash %.12s…, the model's %.12s…)", cfg.Data, cfg.Model, man.Tokenizer.SHA256, got)
		}
	}
	if man.Tokenizer.VocabSize > model.VocabSize {
		return fmt.Errorf("finetune: %s: vocabulary of %d tokens, the model has %d", cfg.Data, man.Tokenizer.VocabSize, model.VocabSize)
	}
	if store.SeqLen() > model.MaxPositionEmbeddings {
		return fmt.Errorf("finetune: %s: sequence length %d exceeds the model's max_position_embeddings %d (prepare the data with a sequence length of %d or less)",
			cfg.Data, store.SeqLen(), model.MaxPositionEmbeddings, model.MaxPositionEmbeddings)
	}
	return nil
}

// work is what one rank of a run on grid g allocates, as the engine's
// memory accounting sizes it: training passes of micro_batch/(data·Z)
// sequences of the dataset's length, the held-out evaluation's forward
// passes when the dataset has a holdout split, and the optimizer's
// moments.
//
// With a lora block the base is frozen: no gradients or moments of its
// own, held in the block's base dtype.
func work(cfg Config, model *checkpoints.Config, store *data.Store, g comm.Grid, ov parallel.Overlap) (llama.Work, error) {
	ranks := 1
	if g != (comm.Grid{}) {
		ranks = g.Data * g.Z
	}
	opt, err := cfg.ModelOptions(model)
	if err != nil {
		return llama.Work{}, err
	}
	if err := llama.CheckActivations(opt.Activations, g); err != nil {
		return llama.Work{}, fmt.Errorf("finetune: precision %s: %w", cfg.Precision, err)
	}
	w := llama.Work{Grid: g, Overlap: ov, Train: true, Recompute: opt.Recompute, Micro: cfg.BatchSize / max(1, cfg.MicroBatch),
		Batch: max(1, cfg.MicroBatch/ranks), SeqLen: store.SeqLen(), LoRA: opt.LoRA, BaseDType: opt.BaseDType,
		Activations: opt.Activations}
	if cfg.Optimizer.Name == "adamw" {
		w.Moments = 2
	}
	w.Zero = cfg.Zero
	w.MomentDType, w.SplitMaster, w.FusedOptimizer = cfg.Optimizer.momentDType(), opt.SplitMaster, opt.FusedOptimizer
	w.Snapshot = cfg.SaveAsync
	if cfg.EvalEvery > 0 && store.NumSequences(data.Holdout) > 0 {
		batch := cfg.EvalBatch
		if batch == 0 {
			batch = cfg.MicroBatch
		}
		w.EvalBatch = max(1, batch/ranks)
	}
	return w, nil
}

// checkBatch refuses a batch larger than the train split: every step
// would hold some sequences twice, and an epoch would be less than one
// step.
func checkBatch(cfg Config, store *data.Store) error {
	if n := store.NumSequences(data.Train); cfg.BatchSize > n {
		return fmt.Errorf("finetune: batch_size %d is more than the %d sequences of %s's train split (want at most %d)", cfg.BatchSize, n, cfg.Data, n)
	}
	return nil
}
