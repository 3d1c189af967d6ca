package finetune

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data"
)

func TestStopIDs(t *testing.T) {
	if got := StopIDs(nil); got != nil {
		t.Errorf("StopIDs(nil) = %v, want nil", got)
	}
	tok, _, err := data.OpenTokenizer("builtin:llama3")
	if err != nil {
		t.Fatal(err)
	}
	eos, ok := tok.EOS()
	if !ok {
		t.Fatal("llama3 has no EOS")
	}
	if got := StopIDs(tok); !slices.Equal(got, []int32{eos}) {
		t.Errorf("StopIDs(llama3) = %v, want [%d]", got, eos)
	}
}

func TestCheckRunFolder(t *testing.T) {
	root := string(filepath.Separator)
	tests := []struct {
		out  string
		want string // in the error; "" for none
	}{
		{root, "is the filesystem root itself"},
		{filepath.Join(t.TempDir(), "run"), ""},
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" && home != root {
		tests = append(tests, struct{ out, want string }{home, "is your home folder itself"})
	}
	for _, tc := range tests {
		err := CheckRunFolder(tc.out)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckRunFolder(%q) = %v, want %q", tc.out, err, tc.want)
		}
	}
}
