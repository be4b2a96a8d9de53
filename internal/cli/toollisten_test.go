package cli

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// TestPrivilegedToolListenOnDev: the stock tools' listener takes
// connections that arrive on its interface and refuses those from another
// (here loopback, in the same namespace).
func TestPrivilegedToolListenOnDev(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	var ln net.Listener
	if err := topo.A.NS.Do(func() (err error) {
		ln, err = listenOnDev(t.Context(), topo.A.Name, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dial := func(ns *netlab.NS, addr string) error {
		return ns.Do(func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, port), 3*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	if err := dial(topo.B.NS, topo.A.IPv4.String()); err != nil {
		t.Errorf("from the peer over %s: %v", topo.A.Name, err)
	}
	if err := dial(topo.A.NS, "127.0.0.1"); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("over loopback: %v, want connection refused", err)
	}
}
