// Package experiments runs memorization studies: YAML specs of a base
// model, target documents with held-out controls, arms (standard and
// goldfish losses, any setting overridden per arm) and seeds; the
// resumable runner that prepares the data, makes the base model, trains
// every arm with finetune and evaluates it with memorization, and writes
// the report at the end (package report: tables, a CSV of every number and
// plots). It composes finetune and memorization and reimplements neither.
//
// A study's output folder is laid out as package report describes; an arm
// is done when its result.json (a report.ArmResult) exists, so a run can be
// stopped and resumed at any point, and report.Write can run while a study
// is in progress. The demo (DemoSpec) is a study of bundled data only.
package experiments
