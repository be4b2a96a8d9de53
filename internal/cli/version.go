package cli

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"
)

var versionCommand = &Command{
	Name:       "version",
	ShortUsage: "xdproce version",
	ShortHelp:  "print the module version and VCS revision the binary was built from",
	LongHelp: `Version prints what the Go toolchain recorded in the binary
(runtime/debug.ReadBuildInfo): the module path and version ("(devel)" for a
build from a checkout), the VCS revision and its time, with "modified" when
the checkout had uncommitted changes, and the Go version. A line is left out
when the build did not record it (go build -buildvcs=false, go run).
'xdproce --version' prints the short form on one line.

EXAMPLES
  xdproce version`,
	Setup: func(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
		return func(_ context.Context, args []string) error {
			if len(args) > 0 {
				return usageErrorf("xdproce version", "takes no arguments, got %q", args)
			}
			bi, ok := debug.ReadBuildInfo()
			if !ok {
				return fmt.Errorf("version: the binary carries no build information")
			}
			for _, l := range versionLines(bi) {
				fmt.Fprintln(env.Stdout, l)
			}
			return nil
		}
	},
}

// versionLines are the lines 'xdproce version' prints for bi.
func versionLines(bi *debug.BuildInfo) []string {
	lines := []string{"xdproce " + versionOf(bi), "module   " + bi.Main.Path + " " + bi.Main.Version}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if rev := vcs["vcs.revision"]; rev != "" {
		if vcs["vcs.modified"] == "true" {
			rev += " (modified)"
		}
		lines = append(lines, "revision "+rev)
	}
	if t := vcs["vcs.time"]; t != "" {
		lines = append(lines, "time     "+t)
	}
	return append(lines, "go       "+bi.GoVersion)
}

// Version returns the module version and VCS revision the binary was built
// from, as far as the build recorded them, and the Go version: one line,
// for --version.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " (" + rev + dirty + ")"
	}
	return v + " " + bi.GoVersion
}
