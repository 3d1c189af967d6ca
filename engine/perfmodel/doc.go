// Package perfmodel predicts the memory, communication and time of a
// training step of the 4D-parallel engine (AxoNN's Data × X × Y × Z tensor
// parallelism) on a given number of GPUs, and ranks the process grids, as
// AxoNN's communication model (Megatron-AxoNN examples/comm_model.py) does
// before a large run.
//
// # Layout
//
// Ranks are numbered X fastest, then Y, Z, data (Grid). Each tensor is cut
// as its family declares it (checkpoints.Split, which engine/parallel
// shards by and this package reads): a weight W[out, in] into an (x, y)
// block — [out/Y, in/X], or [out/X, in/Y] for the "transposed" o_proj and
// down_proj — and the block is flattened and split evenly over Z. The batch's sequences are split over Data·Z; the X·Y ranks
// at one (data, z) coordinate share its tokens. The residual stream is
// [m, H/X] on every rank, replicated over Y: q/k/v and gate/up take it and
// give heads or intermediate features split over Y; o_proj and down_proj
// take those and give [m, H/X] back. So no re-layout happens between
// layers, RMSNorm all-reduces each token's statistics over X, and norm
// weight gradients are reduced over data-z (the Data·Z ranks) only. The
// embedding, the LM head and the cross-entropy are vocabulary-parallel over
// Y. Grid.Validate lists the divisibility rules this implies.
//
// # Memory
//
// Per rank (Memory): what the engine allocates for the step, from its own
// accounting (llama.Itemize of Step.Work), not a formula of this package:
// the float32 weight shards, their gradients and AdamW's two moments; the
// micro-batch's workspace — activations with or without recomputation,
// flash attention's per-row log-sum-exp, a chunk of logits, the grid's
// scratch —; and, when Z > 1, the gathered weight blocks of the largest
// unit (doubled by prefetching) and the gradient blocks before their
// reduce-scatter. Plans needing more than DefaultMemoryFraction of the
// device are dropped.
//
// # Communication
//
// Collectives itemizes every collective of an optimizer step with the
// logical payload of a call, the number of calls, the group and the ring
// factor; SentElements is what one rank sends. The 4D engine's
// communicators count the same quantities, so a test can compare them
// call for call. Groups of one rank communicate nothing and are omitted.
//
// # Time
//
// Compute is the rank's kernels, from the engine's own list of what a
// step launches (llama.StepKernelsOf, held equal to a recorded step by a
// test), each at its class's modelled rate on the device (kernels.go:
// KernelRates, each figure with its source): GEMMs at cuBLAS's
// large-shape efficiency less tile, wave and K quantisation; bf16 flash
// attention at a rate derived from the GPU's pipes; float32 attention
// at the scalar kernels' shared-memory bound; memory-bound kernels at a
// share of the HBM bandwidth. There is no global efficiency; a device
// described by its measured step efficiency (MeasuredDevice) times the
// list's FLOPs at that share of its peak. Communication is bytes sent
// over the per-GPU bandwidth of the link a group spans (NVLink inside a
// node, the network across nodes; Grid.InterNode). With overlap (the
// default) only the communication that compute cannot hide is added.
// MFU counts engine.ModelFLOPsPerToken.
//
// The model ignores latency (per-call start-up cost), contention between
// groups sharing a link, and pipeline bubbles between overlapped phases;
// it is for ranking grids and sizing runs, not for promising a number.
//
// # Measured CPU nodes
//
// MeasuredDevice describes a machine from memtrain's own benchmarks (`memtrain
// bench step` for the peak and efficiency, `memtrain bench comm --device`
// for the collectives), for CPU ranks — MPI processes or in-process ranks —
// that share one node's cores. Four things differ from the GPU table there,
// each a Device field the table leaves zero:
//
//   - SharedNode: the ranks of a grid divide the node's compute, memory and
//     bandwidth, so a rank computes at 1/r of the node's rate (r ranks on
//     the node), and communication hides behind nothing, since the cores
//     that compute also copy and add the collectives' buffers;
//   - Timings: collective calls as measured, with every group busy, which
//     replace bandwidth and Latency; on such a machine a call's time is not
//     bytes over one bandwidth (an all-reduce of 64 MiB runs at a third of
//     the bus bandwidth of one of 1 MiB, which stays in cache, and a call
//     of a few KiB costs a few hundred microseconds of scheduling);
//   - WireBytes 4: the CPU engine computes and sends float32;
//   - LogitBytes: the cross-entropy's passes over the logits, memory-bound
//     and a tenth of a one-rank step for a small model with a large
//     vocabulary, which a grid multiplies: the X ranks of a coordinate each
//     repeat them, and the vocabulary-parallel loss of Y > 1 makes about
//     four passes where one rank makes one (lossSeconds).
//
// scripts/calibrate-plan.sh checks the result: the plan's ranking of the
// grids of 4 and of 8 MPI ranks against their measured step times.
package perfmodel
