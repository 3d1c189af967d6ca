package finetune

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/checkpoints/hub"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
)

// CheckpointsDir is the folder of a run's checkpoints, inside the run folder.
const CheckpointsDir = "checkpoints"

// ResolveModel turns a model path into a checkpoint folder. It accepts a
// checkpoint folder (one with config.json), returned as it is; a run folder
// (one with checkpoints/latest), resolved to its latest checkpoint; or a
// checkpoints/latest file itself, resolved to the checkpoint it names.
// A path that does not exist and reads NAMESPACE/NAME or
// NAMESPACE/NAME@REVISION is a Hugging Face model, resolved to its
// snapshot in huggingface_hub's cache (hub.DefaultCache), never fetched:
// missing, it is an error wrapping a *hub.NotCachedError.
// resolved says whether dir differs from path (a run folder, a latest
// file or a Hub model), so that a caller can say which checkpoint it
// chose. A path that is none of these is an error that names it and the
// accepted forms.
//
// A training checkpoint (one with a manifest, whichever way it was named)
// is verified against its manifest before it is returned
// (VerifyCheckpoint: every file's size and SHA-256, a read of the whole
// checkpoint, about a second a GB): a damaged one is an error naming the
// file, and, for a run folder, the newest intact checkpoint to use
// instead. Whoever loads a run's weights — fine-tuning from them, an
// export, an evaluation — loads verified bytes.
func ResolveModel(path string) (dir string, resolved bool, err error) {
	dir, resolved, err = ResolvePath(path)
	if err != nil || !isFile(filepath.Join(dir, ManifestFile)) {
		return dir, resolved, err
	}
	if _, verr := VerifyCheckpoint(dir); verr != nil {
		var ce *CheckpointError
		if errors.As(verr, &ce) {
			verr = fmt.Errorf("%s: %s", ce.Path, ce.short())
		}
		if resolved {
			ckdir := filepath.Dir(dir)
			if ok, _, lerr := LatestVerified(ckdir); lerr == nil {
				return "", false, &ResolveError{What: "model", Path: path,
					Err: fmt.Errorf("its latest checkpoint is damaged: %w; the newest intact one is %s: name it as the model to use it", verr, ok)}
			}
		}
		return "", false, &ResolveError{What: "model", Path: path, Err: verr}
	}
	return dir, resolved, nil
}

// ResolveError is a model or adapter path that does not resolve. Its
// message names the path and what is wrong with it, without a package
// prefix: it is about the user's input, which each command reports in its
// own words ("generate: model nosuch: no such file or folder …").
type ResolveError struct {
	What string // "model" or "adapter"
	Path string // as given
	Err  error
}

func (e *ResolveError) Error() string { return e.What + " " + e.Path + ": " + e.Err.Error() }
func (e *ResolveError) Unwrap() error { return e.Err }

// ResolvePath is ResolveModel without the verification, for a reader of a
// checkpoint's metadata alone (inspect, which verifies on request).
func ResolvePath(path string) (dir string, resolved bool, err error) {
	fail := func(format string, args ...any) (string, bool, error) {
		return "", false, &ResolveError{What: "model", Path: path, Err: fmt.Errorf(format, args...)}
	}
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		want := fmt.Sprintf("no such file or folder (want a checkpoint folder, a run folder or its %s file)", filepath.Join(CheckpointsDir, LatestFile))
		if dir, ok, err := hubSnapshot(path); ok {
			if err != nil {
				return fail("%s, and the %w", want, err)
			}
			return dir, true, nil
		}
		return fail("%s", want)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fail("%w", err)
	}
	latest := ""
	switch {
	case info.Mode().IsRegular() && filepath.Base(path) == LatestFile:
		latest = filepath.Dir(path)
	case info.IsDir() && isFile(filepath.Join(path, checkpoints.ConfigFile)):
		return path, false, nil
	case info.IsDir() && isFile(filepath.Join(path, CheckpointsDir, LatestFile)):
		latest = filepath.Join(path, CheckpointsDir)
	default:
		return fail("not a checkpoint folder (with %s), a run folder (with %s) or a %s file",
			checkpoints.ConfigFile, filepath.Join(CheckpointsDir, LatestFile), filepath.Join(CheckpointsDir, LatestFile))
	}
	dir, err = latestCheckpoint(latest)
	if err != nil {
		return fail("%w", err)
	}
	if !isFile(filepath.Join(dir, checkpoints.ConfigFile)) {
		return fail("%s names %s, which has no %s", filepath.Join(latest, LatestFile), dir, checkpoints.ConfigFile)
	}
	return dir, true, nil
}

// hubSnapshot resolves a Hugging Face model reference from the cache; ok
// is false when path is not one.
func hubSnapshot(path string) (dir string, ok bool, err error) {
	repo, rev, ok := hub.ParseModelRef(path)
	if !ok {
		return "", false, nil
	}
	cache, err := hub.DefaultCache()
	if err == nil {
		dir, err = cache.Snapshot(repo, rev)
	}
	return dir, true, err
}

// isFile reports whether path is a regular file (following links).
func isFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}

// A ModelRef is a model as the commands load it: a checkpoint folder and,
// for a LoRA-adapted model, the adapter's folder (a PEFT adapter folder,
// or a LoRA run's training checkpoint).
type ModelRef struct {
	Dir, Adapter string
}

// ResolveAdapted resolves a model path as ResolveModel does, and an
// adapter path, which may be empty. The model may itself name an adapter:
// a PEFT adapter folder (a LoRA run's RUN/final), a LoRA run's training
// checkpoint, or a LoRA run folder (its latest checkpoint); its base is
// then the adapter's base_model_name_or_path, which must be a local
// folder. note, when not empty, says what the model path resolved to.
func ResolveAdapted(model, adapter string) (ref ModelRef, note string, err error) {
	adapterDir := ""
	dir := model
	resolved := false
	if isFile(filepath.Join(model, checkpoints.AdapterConfigFile)) && !isFile(filepath.Join(model, checkpoints.ConfigFile)) {
		adapterDir = model
	} else {
		if dir, resolved, err = ResolveModel(model); err != nil {
			return ModelRef{}, "", err
		}
		if isFile(filepath.Join(dir, checkpoints.AdapterConfigFile)) {
			adapterDir = dir
		}
	}
	if adapterDir != "" {
		if adapter != "" {
			return ModelRef{}, "", &ResolveError{What: "model", Path: model, Err: fmt.Errorf("is a LoRA adapter already; give its base as the model to add adapter %s", adapter)}
		}
		base, err := checkpoints.AdapterBase(adapterDir)
		if err != nil {
			return ModelRef{}, "", err
		}
		// A PEFT adapter from the Hub names its base by its Hub id.
		if !isFile(filepath.Join(base, checkpoints.ConfigFile)) {
			if dir, ok, err := hubSnapshot(base); ok && err == nil {
				base = dir
			}
		}
		if base == "" || !isFile(filepath.Join(base, checkpoints.ConfigFile)) {
			return ModelRef{}, "", &ResolveError{What: "model", Path: model, Err: fmt.Errorf("is a LoRA adapter of %q, which is not a local checkpoint folder: give the base as the model and %s as the adapter", base, adapterDir)}
		}
		return ModelRef{Dir: base, Adapter: adapterDir}, fmt.Sprintf("%s → %s with the LoRA adapter %s", model, base, adapterDir), nil
	}
	if resolved {
		note = fmt.Sprintf("%s → %s", model, dir)
	}
	if adapter != "" {
		if !isFile(filepath.Join(adapter, checkpoints.AdapterConfigFile)) {
			return ModelRef{}, "", &ResolveError{What: "adapter", Path: adapter, Err: fmt.Errorf("not a PEFT adapter folder (no %s)", checkpoints.AdapterConfigFile)}
		}
	}
	return ModelRef{Dir: dir, Adapter: adapter}, note, nil
}

// LoadModel loads the model of ref on backend b: its checkpoint (this
// rank's shards, with opt.Parallel) and, when ref has one, its LoRA
// adapter on top (opt.LoRA is set from the adapter's configuration; a
// bf16 base stays bf16 in memory, as training held it, unless Z-sharded:
// the weights are the same values either way; with bf16 activations the
// base is held in bf16, which they multiply it in).
func LoadModel(b engine.Backend, ref ModelRef, opt llama.Options) (*llama.Model, error) {
	ck, err := checkpoints.Open(ref.Dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	opt.Parallel = parallel.OrOne(opt.Parallel, b)
	var ad *checkpoints.Adapter
	if ref.Adapter != "" {
		if ad, err = checkpoints.OpenAdapter(ref.Adapter, ck.Config); err != nil {
			return nil, err
		}
		defer ad.Close()
		opt.LoRA = ad.Config
		d, err := checkpoints.ParseDType(ck.Config.TorchDType)
		storedBF16 := err == nil && d == checkpoints.DTypeBF16
		if (storedBF16 || opt.Activations == engine.BF16) && opt.Parallel.Z.Size() == 1 {
			opt.BaseDType = engine.BF16
		}
	}
	m, err := llama.Load(b, ck, opt)
	if err != nil {
		return nil, err
	}
	if ad != nil {
		if err := m.LoadAdapters(ad.Weights); err != nil {
			m.Free()
			return nil, fmt.Errorf("finetune: %s: %w", ref.Adapter, err)
		}
	}
	return m, nil
}
