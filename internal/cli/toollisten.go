package cli

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// listenOnDev listens on TCP port for the stock tools' exchanges (perftest's,
// ibv_*_pingpong's), bound to the interface ifname (SO_BINDTODEVICE): those
// exchanges carry queue pair numbers and rkeys unauthenticated, so only
// peers on the benchmark's own interface reach them. The callers accept the
// connections of one test and close the listener.
func listenOnDev(ctx context.Context, ifname string, port int) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = bindToDevice(int(fd), ifname) }); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("bind to %s: %w", ifname, serr)
		}
		return nil
	}}
	ln, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// acceptOne waits for one connection on ln; once ctx is done (its AfterFunc
// closes ln), the error is ctx's.
func acceptOne(ctx context.Context, ln net.Listener) (net.Conn, error) {
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("accept: %w", err)
	}
	return c, nil
}
