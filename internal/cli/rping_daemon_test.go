package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// TestPrivilegedRpingDaemon: xdproce rping between a client of the xdproce
// daemon holding A and a process that opens B itself, each role on each
// side: the RDMA CM exchange goes through the daemon's QP1 steering, and
// both print rping's ping lines for -C 3.
func TestPrivilegedRpingDaemon(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	sock := filepath.Join(t.TempDir(), "d.sock")
	d := startDaemon(t, topo.A.NS, topo.A.Name, sock, "--link", "xsk")
	viaDaemon := func(ns *netlab.NS, ifname string) (*netlab.NS, []string) {
		return ns, []string{"--dev", ifname, "--link", "daemon", "--daemon", sock}
	}
	own := func(ns *netlab.NS, ifname string) (*netlab.NS, []string) {
		return ns, []string{"--dev", ifname, "--link", "xsk"}
	}
	for _, tc := range []struct {
		name           string
		server, client func() (*netlab.NS, []string)
		serverAddr     string
	}{
		{"server-via-daemon", func() (*netlab.NS, []string) { return viaDaemon(topo.A.NS, topo.A.Name) },
			func() (*netlab.NS, []string) { return own(topo.B.NS, topo.B.Name) }, topo.A.IPv4.String()},
		{"client-via-daemon", func() (*netlab.NS, []string) { return own(topo.B.NS, topo.B.Name) },
			func() (*netlab.NS, []string) { return viaDaemon(topo.A.NS, topo.A.Name) }, topo.B.IPv4.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			sns, sargs := tc.server()
			so, se, done := startRpingServer(t, ctx, sns.Command(ctx, binary, append(append([]string{"rping"}, sargs...), "-s", "-a", tc.serverAddr, "-v", "-d")...))
			cns, cargs := tc.client()
			r := runCmd(t, cns.Command(ctx, binary, append(append([]string{"rping"}, cargs...), "-c", "-a", tc.serverAddr, "-C", "3", "-v")...))
			awaitServer(t, ctx, done, r, so, se)
			buf := make([]byte, 64) // rping's default -S
			var want, wantSrv strings.Builder
			for i := range 3 {
				fillRping(buf, i, byte('A'+i))
				fmt.Fprintf(&want, "ping data: %s\n", cString(buf))
				fmt.Fprintf(&wantSrv, "server ping data: %s\n", cString(buf))
			}
			if r.stdout != want.String() || so.String() != wantSrv.String() {
				t.Errorf("client stdout:\n%s\nserver stdout:\n%s\nwant:\n%s%s", r.stdout, so.String(), want.String(), wantSrv.String())
			}
			if logs := d.out.String() + d.errb.String(); !strings.Contains(logs, "client attached") || !strings.Contains(logs, "rping") {
				t.Errorf("the daemon logged no rping client:\n%s", logs)
			}
		})
	}
}
