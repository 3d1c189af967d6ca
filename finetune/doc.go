// Package finetune owns the training loop: configuration (Config, YAML and
// flags), AdamW and SGD on the backend, the learning-rate schedule, global
// gradient-norm clipping, accumulation over micro-batches with the loss
// normalised over the whole global batch (TrainStep), training checkpoints
// committed as whole directories with bit-identical resume (SaveCheckpoint,
// LoadCheckpoint), sharded as the grid holds the weights, every rank
// writing its own pieces, synchronously or in the background (save_async),
// and loadable on any grid, each with a manifest of its files' checksums
// and its tensors' pieces that resume verifies (VerifyCheckpoint,
// LatestVerified), the finished run's HF export (RUN/final), per-step
// metrics, and the
// stops on a non-finite or diverging loss (Run.Train). It drives the engine
// and never duplicates model math.
package finetune
