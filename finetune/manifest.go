package finetune

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
)

// ManifestFile, in a training checkpoint, records every other file of it
// with its size and SHA-256, taken as the file was written. It is written
// last, just before the checkpoint's folder is committed, so a committed
// checkpoint without one is incomplete (or was saved before manifests:
// trainer_state.json version 1).
const ManifestFile = checkpoints.ManifestFile

// Manifest is the content of ManifestFile.
type Manifest struct {
	Version int                            `json:"version"`
	Step    int                            `json:"step"`
	Files   map[string]checkpoints.FileSum `json:"files"` // by file name, every file of the checkpoint but the manifest
	// Grid is the grid that saved the checkpoint (version 2); Tensors
	// maps every full tensor, weights by HF name and moments as
	// exp_avg/NAME and exp_avg_sq/NAME, to its pieces in the files, and
	// PieceFiles are the files its PieceGrids index.
	Grid       *GridShape           `json:"grid,omitempty"`
	PieceFiles []string             `json:"piece_files,omitempty"`
	Tensors    checkpoints.PieceMap `json:"tensors,omitempty"`
}

// GridShape is a grid's size along each axis, as the manifest records it.
type GridShape struct {
	Data int `json:"data"`
	X    int `json:"x"`
	Y    int `json:"y"`
	Z    int `json:"z"`
}

func gridOf(g comm.Grid) *GridShape { return &GridShape{Data: g.Data, X: g.X, Y: g.Y, Z: g.Z} }

// manifestVersion is what SaveCheckpoint writes: 2, with the grid and the
// tensors' pieces; version 1 manifests (one file per kind of tensor) are
// still read.
const manifestVersion = 2

// ErrNoManifest reports a checkpoint folder without ManifestFile.
var ErrNoManifest = errors.New("missing: no checksums to verify against")

// A CheckpointError reports a checkpoint that failed verification: which
// file, and what is wrong with it.
type CheckpointError struct {
	Path string // the checkpoint folder
	File string // the bad file's name
	Err  error
}

func (e *CheckpointError) Error() string {
	return fmt.Sprintf("finetune: %s: %s: %v", e.Path, e.File, e.Err)
}

func (e *CheckpointError) Unwrap() error { return e.Err }

// short is the error without the checkpoint's path: the bad file and why.
func (e *CheckpointError) short() string { return fmt.Sprintf("%s: %v", e.File, e.Err) }

// ParseManifest reads a manifest strictly: its version, a non-negative
// step, and at least one file, each a plain file name (no folder, not the
// manifest itself) with a non-negative size and a SHA-256 of 64 lower-case
// hex digits; in version 2, the grid and a piece map that passes
// checkpoints.PieceMap.Check, each piece in one of the files. Unknown keys and trailing data are errors, so that damage
// to the manifest reads as damage rather than as an empty record.
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return m, errors.New("data after the manifest")
	}
	switch {
	case m.Version != 1 && m.Version != manifestVersion:
		return m, fmt.Errorf("version %d (want 1 or %d)", m.Version, manifestVersion)
	case m.Step < 0:
		return m, fmt.Errorf("step %d", m.Step)
	case len(m.Files) == 0:
		return m, errors.New("no files")
	case m.Version == 1 && (m.Grid != nil || m.Tensors != nil || m.PieceFiles != nil):
		return m, errors.New("version 1 has no grid or tensors")
	case m.Version == 2 && (m.Grid == nil || m.Tensors == nil):
		return m, errors.New("version 2 without its grid or tensors")
	case m.Version == 2 && (m.Grid.Data < 1 || m.Grid.X < 1 || m.Grid.Y < 1 || m.Grid.Z < 1 || m.Grid.X > 1<<20 || m.Grid.Y > 1<<20 || m.Grid.Z > 1<<20 || m.Grid.Data > 1<<20):
		return m, fmt.Errorf("grid %+v", *m.Grid)
	}
	if m.Tensors != nil {
		if err := m.Tensors.Check(m.PieceFiles); err != nil {
			return m, fmt.Errorf("tensors: %w", err)
		}
		for _, f := range m.PieceFiles {
			if _, ok := m.Files[f]; !ok {
				return m, fmt.Errorf("piece file %q is not among the files", f)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(m.Tensors)) {
			for _, p := range m.Tensors[name].Pieces {
				if _, ok := m.Files[p.File]; !ok {
					return m, fmt.Errorf("tensor %q: file %q is not among the files", name, p.File)
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.Files)) {
		s := m.Files[name]
		switch {
		case !plainName(name) || name == ManifestFile:
			return m, fmt.Errorf("file %q: not a file of the checkpoint", name)
		case s.Size < 0:
			return m, fmt.Errorf("file %q: size %d", name, s.Size)
		case !isSHA256(s.SHA256):
			return m, fmt.Errorf("file %q: sha256 %q is not 64 lower-case hex digits", name, s.SHA256)
		}
	}
	return m, nil
}

// plainName reports whether name names a file directly inside a folder.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, `/\`+"\x00")
}

func isSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// encodeManifest is the manifest as written: indented JSON, file names
// sorted (encoding/json sorts map keys), and a newline.
func encodeManifest(m Manifest) ([]byte, error) {
	m.Version = manifestVersion
	if m.Tensors == nil {
		m.Version = 1
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// VerifyCheckpoint checks the checkpoint folder path against its
// manifest: every file it records is there, of its recorded size, with
// its recorded SHA-256, and the files a resume reads (trainer_state.json,
// config.json, the weights) are among them. It reads every file. A bad
// checkpoint's error is a *CheckpointError naming the first bad file
// (ErrNoManifest when the manifest itself is missing); sizes are all
// checked before anything is hashed, so a truncated file is found without
// reading the others.
func VerifyCheckpoint(path string) (Manifest, error) { return verifyShare(path, 0, 1) }

// verifyShare is VerifyCheckpoint's share of one of ranks ranks: the
// manifest, read by each, and the sizes, then the SHA-256, of the files
// whose index among the sorted names is rank modulo ranks, so that the
// ranks of a grid read each file once between them (verifyOn).
func verifyShare(path string, rank, ranks int) (Manifest, error) {
	bad := func(file string, err error) (Manifest, error) {
		return Manifest{}, &CheckpointError{Path: path, File: file, Err: err}
	}
	b, err := os.ReadFile(filepath.Join(path, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(path); serr != nil {
			return Manifest{}, fmt.Errorf("finetune: %w", serr)
		}
		return bad(ManifestFile, ErrNoManifest)
	}
	if err != nil {
		return bad(ManifestFile, err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return bad(ManifestFile, fmt.Errorf("unreadable (%v)", err))
	}
	required := []string{StateFile, checkpoints.ConfigFile}
	if m.Tensors == nil {
		weights := checkpoints.SafetensorsFile
		if _, ok := m.Files[weights]; !ok {
			weights = checkpoints.SafetensorsIndexFile
		}
		required = append(required, weights)
	}
	for _, name := range required {
		if _, ok := m.Files[name]; !ok {
			return bad(ManifestFile, fmt.Errorf("does not record %s", name))
		}
	}
	var names []string
	for i, name := range slices.Sorted(maps.Keys(m.Files)) {
		if i%ranks == rank {
			names = append(names, name)
		}
	}
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(path, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return bad(name, errors.New("missing"))
		case err != nil:
			return bad(name, err)
		case !fi.Mode().IsRegular():
			return bad(name, errors.New("not a regular file"))
		case fi.Size() != m.Files[name].Size:
			return bad(name, fmt.Errorf("%d bytes, %s records %d (truncated or overwritten)", fi.Size(), ManifestFile, m.Files[name].Size))
		}
	}
	for _, name := range names {
		sum, err := checkpoints.SumFile(filepath.Join(path, name))
		if err != nil {
			return bad(name, err)
		}
		if sum != m.Files[name] {
			return bad(name, fmt.Errorf("SHA-256 differs from %s's (corrupt)", ManifestFile))
		}
	}
	return m, nil
}

// verifyOn is VerifyCheckpoint on every rank of grid g together: each
// rank checks its share of the files (verifyShare), and all get the
// first failing rank's error, a *CheckpointError naming the bad file (or
// wrapping ErrNoManifest) as the failing rank has it.
func verifyOn(g *parallel.Grid, b engine.Backend, path string) (Manifest, error) {
	m, err := verifyShare(path, g.Rank(), g.World.Size())
	var msg []byte
	if err != nil {
		var ce *CheckpointError
		if errors.As(err, &ce) {
			msg = []byte(ce.File + "\x00" + ce.Err.Error())
		} else {
			msg = []byte("\x00\x00" + err.Error())
		}
	}
	r, text, ferr := g.FirstFailure(b, msg)
	switch {
	case ferr != nil:
		return Manifest{}, errors.Join(err, ferr)
	case r < 0:
		return m, nil
	case r == g.Rank():
		return Manifest{}, err
	}
	file, reason, _ := strings.Cut(string(text), "\x00")
	if file == "" && strings.HasPrefix(reason, "\x00") {
		return Manifest{}, errors.New(reason[1:])
	}
	rerr := errors.New(reason)
	if reason == ErrNoManifest.Error() {
		rerr = ErrNoManifest
	}
	return Manifest{}, &CheckpointError{Path: path, File: file, Err: rerr}
}

// checkResumable is VerifyCheckpoint for a resume: a checkpoint saved
// before manifests (trainer_state.json version 1, no manifest) passes
// unverified, with a warning; any other failure is an error.
func checkResumable(path string) (warning string, err error) {
	return checkVerified(path, VerifyCheckpoint)
}

// checkVerified is checkResumable with verify as the verification.
func checkVerified(path string, verify func(string) (Manifest, error)) (warning string, err error) {
	_, err = verify(path)
	if errors.Is(err, ErrNoManifest) {
		if st, serr := readState(path); serr == nil && st.Version == 1 {
			return fmt.Sprintf("finetune: %s was saved without checksums (%s): resumed unverified", path, ManifestFile), nil
		}
	}
	return "", err
}

// resumeCandidates lists the checkpoints of the checkpoints folder dir
// that a resume may use, in the order to try them: latest's target, then
// the step-* checkpoints older than it, newest first (never a newer one,
// which a run resumed from an older checkpoint left behind). When latest
// is missing or unreadable, it lists every step-* checkpoint, newest
// first, and says why in a warning. The list depends only on the folder,
// so every rank of a grid computes the same one.
func resumeCandidates(dir string) (names []string, warning string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			_, err = LatestCheckpoint(dir) // its "no checkpoint" error
		}
		return nil, "", err
	}
	var steps []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") {
			steps = append(steps, e.Name())
		}
	}
	slices.Sort(steps)
	slices.Reverse(steps)
	latest, lerr := LatestCheckpoint(dir)
	if lerr == nil && !isStepName(filepath.Base(latest)) {
		// Not a name a save writes: the pointer is damaged, and the
		// step folders are what is left to go by.
		lerr = fmt.Errorf("finetune: %s: %s names %q, not a checkpoint of a run", dir, LatestFile, filepath.Base(latest))
	}
	if lerr != nil {
		if len(steps) == 0 {
			return nil, "", lerr
		}
		return steps, fmt.Sprintf("%v; trying the checkpoints by step", lerr), nil
	}
	name := filepath.Base(latest)
	names = []string{name}
	for _, s := range steps {
		if s < name {
			names = append(names, s)
		}
	}
	return names, "", nil
}

// isStepName reports whether name is StepName's: "step-" and eight or
// more digits.
func isStepName(name string) bool {
	digits, ok := strings.CutPrefix(name, "step-")
	if !ok || len(digits) < 8 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// LatestVerified is LatestCheckpoint that verifies: it returns the newest
// checkpoint of the checkpoints folder dir that a resume can use —
// latest's target if it verifies (VerifyCheckpoint), else the newest older
// one that does — and a one-line warning for each checkpoint passed over,
// naming its bad file. When none is intact, the error names each one
// tried and its bad file.
func LatestVerified(dir string) (path string, warnings []string, err error) {
	names, warn, err := resumeCandidates(dir)
	if err != nil {
		return "", nil, err
	}
	i, warnings, err := pickVerified(dir, names, checkResumable)
	if err != nil {
		return "", nil, err
	}
	if warn != "" {
		warnings = append([]string{warn}, warnings...)
	}
	return filepath.Join(dir, names[i]), warnings, nil
}

// pickVerified returns the index of the first of the checkpoints names of
// dir that check (checkResumable) accepts, and the warnings of those
// passed over (and of an unverified legacy one).
func pickVerified(dir string, names []string, check func(string) (string, error)) (int, []string, error) {
	var skipped []string
	for i, name := range names {
		path := filepath.Join(dir, name)
		warn, err := check(path)
		if err != nil {
			var ce *CheckpointError
			if errors.As(err, &ce) {
				skipped = append(skipped, name+": "+ce.short())
			} else {
				skipped = append(skipped, fmt.Sprintf("%s: %v", name, err))
			}
			continue
		}
		var warnings []string
		for _, s := range skipped {
			warnings = append(warnings, fmt.Sprintf("finetune: %s/%s; resuming from %s", dir, s, name))
		}
		if warn != "" {
			warnings = append(warnings, warn)
		}
		return i, warnings, nil
	}
	return 0, nil, fmt.Errorf("finetune: %s: no intact checkpoint to resume from: %s", dir, strings.Join(skipped, "; "))
}
