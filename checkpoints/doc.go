// Package checkpoints reads and writes Llama checkpoints in HuggingFace
// layout: a folder holding config.json, the weights as safetensors (one file
// or shards with model.safetensors.index.json) under HF's tensor names, and
// the tokenizer files.
//
// Reading is memory-mapped and can convert a rectangular slice of a 2-D
// tensor without touching the rest of it, which is how one rank of a sharded
// run loads only its own part of a very large model. Writing is atomic: every
// file goes to a temporary name in the same folder, is synced, and renamed,
// so a crash mid-save never leaves a torn checkpoint.
//
// Each tensor of a model family is declared once (layout.go): its role and
// how a 4D grid of ranks splits it, which TensorSpecs carries to the engine.
//
// The package knows nothing of the engine; it speaks float32 slices, shapes,
// names and those declarations.
package checkpoints
