// Command xdproce is the command line of the xdproce RoCEv2 stack (see 'xdproce -h' and internal/cli).
package main

import (
	"context"
	"github.com/xdproce/xdproce/internal/cli"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		os.Stderr.WriteString("xdproce: " + err.Error() + "\n")
		os.Exit(cli.ExitCode(err))
	}
}
