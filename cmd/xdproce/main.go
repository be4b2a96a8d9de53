// Command xdproce is the command line of the xdproce RoCEv2 stack (see 'xdproce -h' and internal/cli).
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/xdproce/xdproce/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopProfile := cpuProfile()
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	if err != nil {
		os.Stderr.WriteString("xdproce: " + err.Error() + "\n")
		os.Exit(cli.ExitCode(err))
	}
}

// cpuProfile writes a CPU profile of the whole command to the file
// XDPROCE_CPUPROFILE names, when it is set (for measurements: not a flag
// users see). The returned func stops it.
func cpuProfile() func() {
	path := os.Getenv("XDPROCE_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		os.Stderr.WriteString("xdproce: XDPROCE_CPUPROFILE: " + err.Error() + "\n")
		if f != nil {
			f.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
