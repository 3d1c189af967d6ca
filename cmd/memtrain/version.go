package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is memtrain's release; builds from a checkout add the commit.
const version = "0.1.0-dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print memtrain's version, commit and Go toolchain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			commit, dirty := "unknown", ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					switch s.Key {
					case "vcs.revision":
						commit = s.Value
					case "vcs.modified":
						if s.Value == "true" {
							dirty = "+dirty"
						}
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "memtrain %s (commit %s%s, %s, %s/%s)\n",
				version, commit, dirty, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
