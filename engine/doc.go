// Package engine owns the computation's shared vocabulary: tensors (dtype,
// device, views), parameters as a logical shape plus the shard a rank
// holds, the Backend interface every device implements, the FLOP
// accounting MFU uses, and the training-memory types.
//
// The implementations live in sub-packages: engine/cpu (the CPU backend),
// engine/cuda (the CUDA backend, libraries loaded at run time),
// engine/gemm (float32 matrix multiply), engine/enginetest (the conformance
// suite every backend runs), engine/llama (the model), engine/comm (the
// communicators), engine/parallel (the 4D grid) and engine/perfmodel (the
// performance and memory model).
package engine
