package finetune

import (
	"fmt"
	"os"
	"path/filepath"
)

// CheckRunFolder refuses a run folder that is the filesystem root or the
// user's home folder itself: a run writes and, when replaced, removes its
// files there, beside everything else the folder holds.
func CheckRunFolder(out string) error {
	abs, err := filepath.Abs(out)
	if err != nil {
		return fmt.Errorf("finetune: out: %w", err)
	}
	what := ""
	if abs == filepath.VolumeName(abs)+string(filepath.Separator) {
		what = "the filesystem root"
	} else if home, err := os.UserHomeDir(); err == nil && home != "" && SamePath(abs, home) {
		what = "your home folder"
	}
	if what != "" {
		return fmt.Errorf("finetune: out: %s is %s itself (want a run folder of its own, such as %s)", out, what, filepath.Join(abs, "run"))
	}
	return nil
}

// SamePath reports whether two paths name the same folder: equal once
// made absolute and clean, or the same file by os.SameFile.
func SamePath(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	if err1 == nil && err2 == nil && aa == ab {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}
