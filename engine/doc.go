// Package engine owns the computation's shared vocabulary: tensors (dtype,
// device, views), parameters as a logical shape plus the shard a rank
// holds, the Backend interface every device implements, the FLOP
// accounting MFU uses, and the training-memory types.
//
// The implementations live in sub-packages: engine/cpu (the CPU backend),
// engine/gemm (float32 matrix multiply), engine/enginetest (the conformance
// suite every backend runs) and engine/llama (the model). Communicators,
// the 4D parallel layers and the CUDA backend come with later issues.
package engine
