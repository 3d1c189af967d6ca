// Package engine owns the computation: tensors and backends (CPU, CUDA), the
// Llama model's forward and backward passes and KV-cache decoding,
// communicators and the 4D parallel layers, and the performance and memory
// model.
//
// So far it holds the memory accounting that `memtrain inspect` reports; the
// model itself arrives with the engine issue, which replaces the documented
// activation formula here with the engine's own accounting.
package engine
