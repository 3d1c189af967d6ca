// Package finetune owns the training loop: configuration (Config, YAML and
// flags), AdamW and SGD on the backend, the learning-rate schedule, global
// gradient-norm clipping, accumulation over micro-batches with the loss
// normalised over the whole global batch (TrainStep), training checkpoints
// committed as whole directories with bit-identical resume (SaveCheckpoint,
// LoadCheckpoint), each with a manifest of its files' checksums that resume
// verifies (VerifyCheckpoint, LatestVerified), per-step metrics, and the
// stops on a non-finite or diverging loss (Run.Train). It drives the engine
// and never duplicates model math.
package finetune
