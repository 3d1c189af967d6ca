package finetune

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/memtrain/memtrain/checkpoints"
)

// CheckpointsDir is the folder of a run's checkpoints, inside the run folder.
const CheckpointsDir = "checkpoints"

// ResolveModel turns a model path into a checkpoint folder. It accepts a
// checkpoint folder (one with config.json), returned as it is; a run folder
// (one with checkpoints/latest), resolved to its latest checkpoint; or a
// checkpoints/latest file itself, resolved to the checkpoint it names.
// resolved says whether dir differs from path (a run folder or a latest
// file), so that a caller can say which checkpoint it chose. A path that is
// none of these is an error that names it and the three accepted forms.
func ResolveModel(path string) (dir string, resolved bool, err error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", false, fmt.Errorf("finetune: model %w", err)
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
		return "", false, fmt.Errorf("finetune: model %s: not a checkpoint folder (with %s), a run folder (with %s) or a %s file",
			path, checkpoints.ConfigFile, filepath.Join(CheckpointsDir, LatestFile), filepath.Join(CheckpointsDir, LatestFile))
	}
	dir, err = LatestCheckpoint(latest)
	if err != nil {
		return "", false, fmt.Errorf("finetune: model %s: %w", path, err)
	}
	if !isFile(filepath.Join(dir, checkpoints.ConfigFile)) {
		return "", false, fmt.Errorf("finetune: model %s: %s names %s, which has no %s", path, filepath.Join(latest, LatestFile), dir, checkpoints.ConfigFile)
	}
	return dir, true, nil
}

// isFile reports whether path is a regular file (following links).
func isFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}
