// Package experiments runs memorization studies: YAML specs of arms and
// seeds, the resumable runner, and reports with tables and plots. It composes
// finetune and memorization and reimplements neither.
//
// The runner is built by the experiments issue; this package is the place
// reserved for it in the package map.
package experiments
