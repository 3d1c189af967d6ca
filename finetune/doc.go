// Package finetune owns the training loop: configuration, AdamW and SGD, the
// learning-rate schedule, gradient clipping and accumulation, mixed precision,
// checkpoint and resume, and metrics. It drives the engine and never
// duplicates model math.
//
// The trainer is built by the fine-tuning issue; this package is the place
// reserved for it in the package map.
package finetune
