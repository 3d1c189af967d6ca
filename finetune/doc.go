// Package finetune owns the training loop: configuration (Config, YAML and
// flags), AdamW and SGD on the backend, the learning-rate schedule, global
// gradient-norm clipping, accumulation over micro-batches with the loss
// normalised over the whole global batch (TrainStep), training checkpoints
// committed as whole directories with bit-identical resume (SaveCheckpoint,
// LoadCheckpoint), and per-step metrics (Run.Train). It drives the engine
// and never duplicates model math.
package finetune
