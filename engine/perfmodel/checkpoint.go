package perfmodel

import "github.com/memtrain/memtrain/checkpoints"

// DefaultFSBandwidth is the aggregate write bandwidth of the shared
// filesystem a checkpoint is saved to when Options.FSBandwidth is not
// set: 100 GB/s, a mid-size parallel filesystem's.
const DefaultFSBandwidth = 100e9

// checkpointBytesPerParam is what a training checkpoint stores a
// parameter: float32 master weight and AdamW's two moments.
const checkpointBytesPerParam = 12

// CheckpointCost is a training checkpoint's saving on a grid, as
// finetune writes it: every (x, y, z) position's rank writes the pieces
// of the weights and moments it holds to two files of its own, all in
// parallel; data-parallel replicas write nothing.
type CheckpointCost struct {
	// BytesPerRank is what a writing rank writes: its shards' float32
	// weights and moments (norm slices counted on every writer, which
	// only y = z = 0 writes: a bound).
	BytesPerRank int64 `json:"bytes_per_rank"`
	// Bytes is the whole checkpoint: 12 bytes a parameter.
	Bytes int64 `json:"bytes"`
	// Files is the number of piece files, 2·X·Y·Z (besides the
	// checkpoint's few small files).
	Files int `json:"files"`
	// SaveSeconds is the time to write them: the filesystem's aggregate
	// bandwidth shared by all writers, or a writer's own network link
	// (the device's inter-node bandwidth), whichever is slower.
	SaveSeconds float64 `json:"save_seconds"`
}

// checkpointCost is the CheckpointCost of model cfg on grid g whose
// ranks store shardParams parameters each. A LoRA run (Options.LoRA)
// saves its adapters alone, whole, as one position of its grid
// (finetune's gridShape): one rank writes them and their moments.
func checkpointCost(cfg *checkpoints.Config, g Grid, shardParams int64, dev Device, o Options) CheckpointCost {
	c := CheckpointCost{
		BytesPerRank: shardParams * checkpointBytesPerParam,
		Bytes:        cfg.Params().Total * checkpointBytesPerParam,
		Files:        2 * g.X * g.Y * g.Z,
	}
	if o.LoRA > 0 {
		n := loraParams(cfg, o.adapters()) * checkpointBytesPerParam
		c = CheckpointCost{BytesPerRank: n, Bytes: n, Files: 2}
	}
	fs := o.FSBandwidth
	if fs <= 0 {
		fs = DefaultFSBandwidth
	}
	c.SaveSeconds = float64(c.Bytes) / fs
	if link := dev.InterNodeBandwidth; link > 0 {
		c.SaveSeconds = max(c.SaveSeconds, float64(c.BytesPerRank)/link)
	}
	return c
}

// loraParams counts the adapters' parameters: PEFT's lora_A [r, in] and
// lora_B [out, r] of every projection a targets, in every layer.
func loraParams(cfg *checkpoints.Config, a *checkpoints.AdapterConfig) int64 {
	var n int64
	for _, s := range declared(cfg) {
		if s.Layer >= 0 && s.Role.Matrix() && a.Targets(s.Role.String()) {
			n += int64(a.R) * int64(s.Shape[0]+s.Shape[1])
		}
	}
	return n * int64(cfg.NumHiddenLayers)
}
