package finetune

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/inputfile"
)

// Files of a training checkpoint, beside the HF checkpoint files.
const (
	// OptimizerFile holds the AdamW moments of a checkpoint saved on one
	// grid position (one rank), full shape, HF names prefixed exp_avg/ and
	// exp_avg_sq/; on a grid each position has its own (shard.go).
	OptimizerFile = "optimizer.safetensors"
	// MasterFile, in checkpoints saved before sharded checkpoints, holds
	// the float32 weights when model.safetensors stored them in another
	// dtype (save_dtype bf16); such checkpoints still resume from it.
	MasterFile = "master.safetensors"
	StateFile  = "trainer_state.json"
	LatestFile = "latest" // in the checkpoints folder: the name of the newest complete checkpoint
)

// TrainerState is what a run needs, besides weights and moments, to resume
// exactly where it stopped.
type TrainerState struct {
	Version        int     `json:"version"`
	Step           int     `json:"step"`            // optimizer steps done
	OptimizerStep  int     `json:"optimizer_step"`  // AdamW's bias-correction counter
	LoaderPosition int64   `json:"loader_position"` // global samples consumed
	TokensSeen     int64   `json:"tokens_seen"`     // input tokens of the steps done: batch_size × sequence length a step, padding included, as tokens_per_s counts them
	LastLoss       float64 `json:"last_loss"`       // the last step's loss (of the last one with targets)
	ConfigHash     string  `json:"config_hash"`     // of the settings that must not change on resume
	// Identity is what a resume must share with this checkpoint, setting
	// by setting (identity.go); checkpoints saved before it have only
	// ConfigHash, which resume compares instead.
	Identity map[string]string `json:"identity,omitempty"`

	Divergence *DivergenceState `json:"divergence,omitempty"` // the divergence watch's state (none when it is off)
}

// stateVersion 2 checkpoints carry a manifest (ManifestFile); version 1
// ones, saved before manifests, still resume.
const stateVersion = 2

// SaveOptions control SaveCheckpoint.
type SaveOptions struct {
	Files map[string][]byte // extra files for the checkpoint (the tokenizer's)
	Keep  int               // checkpoints kept; 0 keeps all
	// Protect names a checkpoint of dir that pruning keeps besides the
	// newest Keep: the run's last good one while its loss is out of band.
	Protect string
	// BeforeCommit, if set, runs on the committing rank when every file
	// of the checkpoint is written and before the directory is committed:
	// crash-safety tests kill the process there.
	BeforeCommit func(tmpDir string)
	// beforeWrite, if set, runs on every rank with its world rank once it
	// knows the temporary folder, before it writes (tests make one rank's
	// write fail there).
	beforeWrite func(rank int, tmpDir string)
}

// SaveCheckpoint writes a complete training checkpoint as one directory,
// committed as a whole: everything is written under a temporary name in
// dir, synced, and renamed to name; then dir/latest is replaced atomically
// to point at it, and all but the newest opt.Keep checkpoints are removed.
// A crash at any point leaves latest pointing at a complete checkpoint.
// Every file's size and SHA-256, hashed as it is written, go into the
// checkpoint's manifest (ManifestFile), written last before the commit,
// against which VerifyCheckpoint checks it later.
//
// The float32 weights and AdamW moments are saved as the grid holds them
// (shard.go): every position of the grid writes its own pieces to its own
// files, in parallel, streaming them from the backend through a bounded
// buffer, so that no rank holds more than its shards; the manifest maps
// each full tensor to its pieces, so that the checkpoint loads on any
// grid. On a grid SaveCheckpoint is collective: rank 0 makes the
// temporary folder and tells the others its name; every rank writes and
// syncs its files; the ranks agree that all did (gathering their
// checksums; one rank's error fails the save on every rank, with that
// error); then rank 0 writes the manifest, commits and prunes, and every
// rank returns its result.
func SaveCheckpoint(dir, name string, m *llama.Model, o *Optimizer, st TrainerState, opt SaveOptions) error {
	src := deviceSource(m, o)
	if o.zero != nil {
		// ZeRO's masters and moments, made whole for the writing ranks.
		h := hostMoments{}
		if err := o.syncMasters(); err != nil {
			return err
		}
		if err := o.gatherSaved(m, h); err != nil {
			return err
		}
		src = withMoments(src, h)
	}
	sv, err := beginSave(dir, name, m, o, st, opt)
	if err != nil {
		return err
	}
	sv.sums, sv.err = sv.write(src)
	return sv.finish()
}

// A save is a checkpoint on its way to disk (SaveCheckpoint's phases):
// begun (its temporary folder made and known to every rank), its files
// written (write, from the device or from a host snapshot, the only
// phase that may run in the background: it calls no collective), and
// finished (finish: the ranks agree, rank 0 commits).
type save struct {
	dir, name, tmp string
	m              *llama.Model
	o              *Optimizer
	st             TrainerState
	opt            SaveOptions
	sums           map[string]checkpoints.FileSum // of this rank's files (rank 0: and its others)
	err            error                          // of writing them
}

// beginSave makes the temporary folder of checkpoint name in dir (rank
// 0) and tells every rank its name. It is collective on a grid.
func beginSave(dir, name string, m *llama.Model, o *Optimizer, st TrainerState, opt SaveOptions) (*save, error) {
	g, b := m.Grid(), m.Backend()
	sv := &save{dir: dir, name: name, m: m, o: o, st: st, opt: opt}
	var err error
	if sv.lead() {
		sv.tmp, err = makeTemp(dir, name)
	}
	if _, err = g.AgreeGather(b, err, nil, 0); err == nil {
		var shared []byte
		shared, err = g.Broadcast(b, []byte(sv.tmp), 1024)
		if err == nil {
			sv.tmp = string(shared)
		}
	}
	if err != nil {
		sv.abandon()
		return nil, err
	}
	return sv, nil
}

func (sv *save) lead() bool { return sv.m.Grid().Rank() == 0 }

// abandon removes the temporary folder of a save that will not commit.
func (sv *save) abandon() {
	if sv.lead() && sv.tmp != "" {
		os.RemoveAll(sv.tmp)
	}
}

// write writes this rank's files of the save from src, and rank 0's
// others (config, tokenizer, trainer state). It calls no collective and
// no backend when src is a host snapshot.
func (sv *save) write(src pieceSource) (map[string]checkpoints.FileSum, error) {
	if sv.opt.beforeWrite != nil {
		sv.opt.beforeWrite(sv.m.Grid().Rank(), sv.tmp)
	}
	sums, err := writeShards(sv.tmp, sv.m, sv.o, src)
	if err == nil && sv.lead() {
		err = writeMeta(sv.tmp, sv.m.Config, sv.st, sv.opt, sums)
	}
	return sums, err
}

// finish makes the ranks agree that every file of the save is written
// (gathering their checksums to rank 0; one rank's error fails it on
// every rank) and rank 0 commit it. It is collective on a grid.
func (sv *save) finish() error {
	m, o, err := sv.m, sv.o, sv.err
	g, b := m.Grid(), m.Backend()
	committed := false
	defer func() {
		if !committed {
			sv.abandon()
		}
	}()
	// Every rank's checksums, in the order of its files (which every
	// rank can name: shardFiles), to the committing rank.
	var enc []byte
	if err == nil && !sv.lead() {
		enc, err = encodeSums(sv.sums, m, o)
	}
	var all [][]byte
	if all, err = g.AgreeGather(b, err, enc, 2*sumBytes); err == nil && sv.lead() {
		err = decodeSums(all, m, o, sv.sums)
	}
	if err == nil && sv.lead() {
		_, moments := o.Moments()
		tensors, files := pieceMap(gridShape(m), m.Trainable(), moments != nil)
		err = commit(sv.dir, sv.name, sv.tmp, Manifest{Step: sv.st.Step, Files: sv.sums, Grid: gridOf(gridShape(m)),
			PieceFiles: files, Tensors: tensors}, sv.opt)
		committed = err == nil
	}
	_, err = g.AgreeGather(b, err, nil, 0)
	if err != nil {
		return err
	}
	return pruneOn(g, b, sv.dir, sv.opt.Keep, sv.opt.Protect)
}

// pruneOn is prune on every rank of grid g (one rank alone: prune): each lists
// the checkpoints (nothing is being removed while they do), all verify
// the candidates together (verifyOn), and rank 0 removes what is not
// kept.
func pruneOn(g *parallel.Grid, b engine.Backend, dir string, keep int, protect string) error {
	if g.World.Size() == 1 {
		return prune(dir, keep, protect, checkResumable)
	}
	kept, old, err := pruneCandidates(dir, keep, g.Rank() == 0)
	if _, err = g.AgreeGather(b, err, nil, 0); err != nil {
		return err
	}
	check := func(path string) (string, error) {
		return checkVerified(path, func(p string) (Manifest, error) { return verifyOn(g, b, p) })
	}
	spare := spared(dir, kept, old, check)
	if g.Rank() == 0 {
		err = removeOld(dir, old, spare, protect)
	}
	_, err = g.AgreeGather(b, err, nil, 0)
	return err
}

// makeTemp makes the temporary folder of checkpoint name in dir.
func makeTemp(dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("finetune: %w", err)
	}
	tmp, err := atomicfile.TempDir(dir, ".tmp-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("finetune: %w", err)
	}
	return tmp, nil
}

// writeMeta writes the committing rank's files besides the shards: the
// tokenizer's, config.json and the trainer state, recording their sums.
func writeMeta(tmp string, cfg *checkpoints.Config, st TrainerState, opt SaveOptions, sums map[string]checkpoints.FileSum) error {
	if err := checkpoints.SaveMeta(tmp, cfg, checkpoints.SaveOptions{DType: checkpoints.DTypeF32, Files: opt.Files, Sums: sums}); err != nil {
		return err
	}
	st.Version = stateVersion
	sb, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	sb = append(sb, '\n')
	if err := atomicfile.WriteFile(filepath.Join(tmp, StateFile), sb); err != nil {
		return err
	}
	sums[StateFile] = checkpoints.SumBytes(sb)
	return nil
}

// commit writes the manifest into the temporary folder tmp, whose every
// other file is written and synced, and commits it as dir/name: rename,
// sync of dir, latest. Pruning follows (finish).
func commit(dir, name, tmp string, man Manifest, opt SaveOptions) error {
	mb, err := encodeManifest(man)
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	// atomicfile syncs the file and then the folder, which holds every
	// file the ranks wrote.
	if err := atomicfile.WriteFile(filepath.Join(tmp, ManifestFile), mb); err != nil {
		return err
	}
	if opt.BeforeCommit != nil {
		opt.BeforeCommit(tmp)
	}
	final := filepath.Join(dir, name)
	if err := os.RemoveAll(final); err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, LatestFile), []byte(name+"\n"))
}

// LatestCheckpoint returns the path of the newest complete checkpoint in
// dir, following its latest pointer.
func LatestCheckpoint(dir string) (string, error) {
	path, err := latestCheckpoint(dir)
	if err != nil {
		return "", fmt.Errorf("finetune: %w", err)
	}
	return path, nil
}

// latestCheckpoint is LatestCheckpoint with errors that name dir but no
// package, for ResolvePath's ResolveError.
func latestCheckpoint(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, LatestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s: no checkpoint (no %s file)", dir, LatestFile)
	}
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(b))
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("%s: %s holds %q, not a checkpoint name", dir, LatestFile, name)
	}
	return filepath.Join(dir, name), nil
}

// readState reads and checks a checkpoint's trainer_state.json.
func readState(path string) (TrainerState, error) {
	var st TrainerState
	b, err := os.ReadFile(filepath.Join(path, StateFile))
	if err != nil {
		return st, fmt.Errorf("finetune: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("finetune: %s: %v", filepath.Join(path, StateFile), err)
	}
	if st.Version < 1 || st.Version > stateVersion {
		return st, fmt.Errorf("finetune: %s: state version %d (want 1 to %d)", filepath.Join(path, StateFile), st.Version, stateVersion)
	}
	return st, nil
}

// LoadCheckpoint restores weights, optimizer moments and the trainer state
// from a checkpoint written by SaveCheckpoint into m and o. On a grid each
// rank reads only its shards, whatever grid saved the checkpoint. It does
// not verify the files' checksums: VerifyCheckpoint does, once, before
// the ranks load (Open's resume does both).
func LoadCheckpoint(path string, m *llama.Model, o *Optimizer) (TrainerState, error) {
	st, err := readState(path)
	if err != nil {
		return st, err
	}
	if m.Adapter() != nil {
		return st, loadAdapterCheckpoint(path, m, o, st)
	}
	ck, err := checkpoints.Open(path)
	if err != nil {
		return st, err
	}
	defer ck.Close()
	if !sameShapes(ck.Config, m.Config) {
		return st, fmt.Errorf("finetune: %s: the checkpoint's tensors do not fit the run's model", path)
	}
	// A sharded checkpoint (manifest version 2) maps its weights and
	// moments to their pieces; older ones hold them in one file each,
	// with float32 master weights beside a rounded export.
	pieces, pieceFiles, err := checkpoints.ReadPieceMap(path)
	if err != nil {
		return st, err
	}
	var weights, moments parallel.SliceReader
	if pieces != nil {
		ws, err := checkpoints.OpenPieces(path, pieces, pieceFiles, checkpoints.IsWeightName)
		if err != nil {
			return st, err
		}
		defer ws.Close()
		weights = ws
		if mv, _ := o.Moments(); mv != nil {
			ms, err := checkpoints.OpenPieces(path, pieces, pieceFiles, func(name string) bool { return !checkpoints.IsWeightName(name) })
			if err != nil {
				return st, err
			}
			defer ms.Close()
			moments = ms
		}
	} else {
		weights = ck.Weights
		if _, err := os.Stat(filepath.Join(path, MasterFile)); err == nil {
			f, err := checkpoints.OpenFile(filepath.Join(path, MasterFile))
			if err != nil {
				return st, err
			}
			defer f.Close()
			weights = f
		}
		if mv, _ := o.Moments(); mv != nil {
			f, err := checkpoints.OpenFile(filepath.Join(path, OptimizerFile))
			if err != nil {
				return st, err
			}
			defer f.Close()
			moments = f
		}
	}
	if err := m.LoadWeights(weights); err != nil {
		return st, fmt.Errorf("finetune: %s: %w", path, err)
	}
	return st, loadMoments(path, m, o, moments, st)
}

// loadMoments reads the optimizer's moments and step.
func loadMoments(path string, m *llama.Model, o *Optimizer, moments parallel.SliceReader, st TrainerState) error {
	if mv, vv := o.Moments(); mv != nil {
		for i, p := range o.params {
			for k, t := range []*engine.Tensor{mv[i], vv[i]} {
				if o.int8 != nil {
					err := o.setMoment(i, k+1, func(dst *engine.Tensor) error { return m.ReadInto(moments, momentPrefixes[k]+p.Name, p, dst) })
					if err != nil {
						return fmt.Errorf("finetune: %s: %w", path, err)
					}
					continue
				}
				read := m.ReadInto
				if o.zero != nil {
					if t == nil {
						continue // an empty chunk
					}
					read = func(src parallel.SliceReader, name string, _ *engine.Param, dst *engine.Tensor) error {
						return o.readChunk(m, src, name, i, dst)
					}
				}
				if err := read(moments, momentPrefixes[k]+p.Name, p, t); err != nil {
					return fmt.Errorf("finetune: %s: %w", path, err)
				}
			}
		}
	}
	o.Step = st.OptimizerStep
	return nil
}

// loadAdapterCheckpoint is LoadCheckpoint for a LoRA run, whose
// checkpoints hold the adapters and their moments (the base stays the
// run's model): the checkpoint's adapter_config.json must be the run's.
func loadAdapterCheckpoint(path string, m *llama.Model, o *Optimizer, st TrainerState) error {
	cfg, err := checkpoints.ReadConfig(filepath.Join(path, checkpoints.ConfigFile))
	if err != nil {
		return err
	}
	if !sameShapes(cfg, m.Config) {
		return fmt.Errorf("finetune: %s: the checkpoint's base does not fit the run's model", path)
	}
	acPath := filepath.Join(path, checkpoints.AdapterConfigFile)
	raw, err := inputfile.ReadFile(acPath)
	if err != nil {
		return fmt.Errorf("finetune: %s: not a LoRA run's checkpoint (%w)", path, err)
	}
	ac, err := checkpoints.ParseAdapterConfig(acPath, raw)
	if err != nil {
		return err
	}
	if a := m.Adapter(); ac.R != a.R || ac.LoRAAlpha != a.LoRAAlpha || ac.UseRSLoRA != a.UseRSLoRA || !slices.Equal(ac.TargetModules, a.TargetModules) {
		return fmt.Errorf("finetune: %s holds an adapter of rank %d on %v; the run's is of rank %d on %v", path, ac.R, ac.TargetModules, a.R, a.TargetModules)
	}
	pieces, pieceFiles, err := checkpoints.ReadPieceMap(path)
	if err != nil {
		return err
	}
	if pieces == nil {
		return fmt.Errorf("finetune: %s: no piece map in its manifest", path)
	}
	ws, err := checkpoints.OpenPieces(path, pieces, pieceFiles, checkpoints.IsWeightName)
	if err != nil {
		return err
	}
	defer ws.Close()
	if err := m.LoadAdapters(ws); err != nil {
		return fmt.Errorf("finetune: %s: %w", path, err)
	}
	var moments parallel.SliceReader
	if mv, _ := o.Moments(); mv != nil {
		ms, err := checkpoints.OpenPieces(path, pieces, pieceFiles, func(name string) bool { return !checkpoints.IsWeightName(name) })
		if err != nil {
			return err
		}
		defer ms.Close()
		moments = ms
	}
	return loadMoments(path, m, o, moments, st)
}

// resume restores the run from the checkpoint from names, or, when from
// is a run folder, from its newest intact checkpoint (LatestVerified: a
// damaged latest one is passed over with a warning). On a grid the ranks
// verify together, each hashing a share of the files, so that the grid
// reads each file once to check it and all choose alike; then every rank
// loads its shards.
func (r *Run) resume(from string) error {
	g, b := r.Model.Grid(), r.Model.Backend()
	lead := g.Rank() == 0
	// On a grid of several ranks they verify together, each a share of
	// the files (verifyOn), and so all choose the same checkpoint; alone,
	// the rank verifies everything.
	check := checkResumable
	shared := g.World.Size() > 1
	if shared {
		check = func(path string) (string, error) {
			return checkVerified(path, func(p string) (Manifest, error) { return verifyOn(g, b, p) })
		}
	}
	path := from
	if isCheckpoint(from) {
		// A checkpoint named by the caller: it must verify; there is
		// nothing to fall back to.
		warn, err := check(from)
		if err != nil {
			return err
		}
		if warn != "" && lead {
			r.Warnings = append(r.Warnings, warn)
		}
	} else {
		dir := filepath.Join(from, "checkpoints")
		names, warn, err := resumeCandidates(dir)
		if shared {
			_, err = g.AgreeGather(b, err, nil, 0)
		}
		if err != nil {
			return err
		}
		i, warnings, err := pickVerified(dir, names, check)
		if err != nil {
			return err
		}
		if lead {
			if warn != "" {
				r.Warnings = append(r.Warnings, warn)
			}
			r.Warnings = append(r.Warnings, warnings...)
		}
		path = filepath.Join(dir, names[i])
	}
	st, err := LoadCheckpoint(path, r.Model, r.Opt)
	if err != nil {
		return err
	}
	if st.Identity != nil {
		if err := checkIdentity(path, st.Identity, r.ident); err != nil {
			return err
		}
	} else if st.ConfigHash != r.Config.resumeHash() {
		// Saved before identities: only the digest of the settings.
		return fmt.Errorf("finetune: %s was saved by a run with other model or data paths, loss, batch size, max_steps, seed or schedule settings (it records only their digest, so which is not known); resume needs the same", path)
	} else {
		r.legacyIdentity = true
	}
	if err := r.Loader.SetPosition(st.LoaderPosition); err != nil {
		return err
	}
	r.Step, r.tokensSeen, r.lastLoss = st.Step, st.TokensSeen, st.LastLoss
	r.restoreDivergence(st.Divergence, st.Step, path)
	return nil
}

// isCheckpoint reports whether path is a training checkpoint rather than
// a run folder: it has a trainer state or a manifest (so that one missing
// its state is reported as such, not as a run without checkpoints).
func isCheckpoint(path string) bool {
	for _, name := range []string{StateFile, ManifestFile} {
		if _, err := os.Stat(filepath.Join(path, name)); err == nil {
			return true
		}
	}
	return false
}

// sameShapes reports whether two configurations have the same tensors,
// by name and shape: what a checkpoint's weights must fit.
func sameShapes(a, b *checkpoints.Config) bool {
	sa, sb := a.TensorSpecs(), b.TensorSpecs()
	if len(sa) != len(sb) {
		return false
	}
	for i := range sa {
		if sa[i].Name != sb[i].Name || !slices.Equal(sa[i].Shape, sb[i].Shape) {
			return false
		}
	}
	return true
}

// prune removes all but the newest keep checkpoints (by name, which sorts
// by step) and any temporary directories left by an interrupted save. It
// never removes latest's target, nor the newest checkpoint a resume can
// use (check: checkResumable): when none of the kept ones verifies (a
// save damaged on its way to disk), the newest older one that does stays
// too, so that keep 1 never leaves nothing to resume from. Checking costs
// a read of the newest checkpoint, and only when something is to be
// removed (on a grid, shared between the ranks: pruneOn). protect, if
// not "", names a checkpoint it keeps too.
func prune(dir string, keep int, protect string, check func(string) (string, error)) error {
	kept, old, err := pruneCandidates(dir, keep, true)
	if err != nil {
		return err
	}
	return removeOld(dir, old, spared(dir, kept, old, check), protect)
}

// pruneCandidates lists the checkpoints of dir to keep and the older
// ones to remove (none to remove when keep is 0 or no more than keep
// exist), and, with clean, removes the temporary folders in dir.
func pruneCandidates(dir string, keep int, clean bool) (kept, old []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("finetune: %w", err)
	}
	var steps []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			if clean {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
			continue
		}
		if strings.HasPrefix(e.Name(), "step-") {
			steps = append(steps, e.Name())
		}
	}
	if keep <= 0 || len(steps) <= keep {
		return steps, nil, nil
	}
	sort.Strings(steps)
	return steps[len(steps)-keep:], steps[:len(steps)-keep], nil
}

// spared is the old checkpoint that must stay because none of the kept
// ones can be resumed from ("" when one can, or nothing is removed).
func spared(dir string, kept, old []string, check func(string) (string, error)) string {
	if len(old) == 0 || newestResumable(dir, kept, check) >= 0 {
		return ""
	}
	if i := newestResumable(dir, old, check); i >= 0 {
		return old[i]
	}
	return ""
}

// removeOld removes the old checkpoints but latest's target, spare and
// protect.
func removeOld(dir string, old []string, spare, protect string) error {
	latest, _ := LatestCheckpoint(dir)
	keep := map[string]bool{filepath.Base(latest): true, spare: true, protect: true}
	for _, s := range old {
		if keep[s] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, s)); err != nil {
			return fmt.Errorf("finetune: %w", err)
		}
	}
	return nil
}

// newestResumable is the index of the newest of the checkpoints names
// (oldest first) of dir that check accepts, or -1.
func newestResumable(dir string, names []string, check func(string) (string, error)) int {
	for i := len(names) - 1; i >= 0; i-- {
		if _, err := check(filepath.Join(dir, names[i])); err == nil {
			return i
		}
	}
	return -1
}

// StepName is the directory name of the checkpoint after step s; it sorts
// by step.
func StepName(s int) string { return fmt.Sprintf("step-%08d", s) }
