// Package goldfish computes the goldfish loss's token-drop masks (static,
// hash-table and hash-avalanche strategies) and the per-token loss weights
// they produce. It works on token ids only and never imports the engine.
//
// The strategies are built by the fine-tuning issue; this package is the
// place reserved for them in the package map.
package goldfish
