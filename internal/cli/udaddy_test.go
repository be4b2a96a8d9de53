package cli

import (
	"context"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

func TestUdaddyUsage(t *testing.T) {
	for _, args := range [][]string{
		{"udaddy", "--dev", "lo", "-P", "ipoib"},    // not RDMA_PS_UDP
		{"udaddy", "--dev", "lo", "-p", "0x106"},    // RDMA_PS_TCP
		{"udaddy", "--dev", "lo", "-c", "0"},        // no connections
		{"udaddy", "--dev", "lo", "-s", "x"},        // not an address
		{"udaddy", "--dev", "lo", "-t", "256"},      // not a traffic class
		{"udaddy", "--dev", "lo", "-f", "name"},     // names are not resolved
		{"udaddy", "--dev", "lo", "extra-argument"}, // no arguments
	} {
		if r := runBinary(t, args...); r.code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage): %s", args, r.code, r.stderr)
		}
	}
}

// TestPrivilegedUdaddy: xdproce udaddy server and client (the real binary)
// in two namespaces: two connections of five 100-byte datagrams each way
// over IPv4 (AF_XDP) and one over IPv6 (UDP link), with udaddy's lines on
// both sides; a client to a port nobody serves prints udaddy's UNREACHABLE
// line with SIDR_REP status 1 (or -110 when nothing answers) and exits
// non-zero.
func TestPrivilegedUdaddy(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	for _, tc := range []struct {
		name, link, addr string
		conns            string
	}{
		{"ipv4-xsk", "xsk", topo.A.IPv4.String(), "2"},
		{"ipv6-udp", "udp", topo.A.IPv6.String(), "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			so, se, done := startServerAt(t, ctx, topo.A.NS.Command(ctx, binary, "udaddy", "--dev", topo.A.Name, "--link", tc.link,
				"-c", tc.conns, "-C", "5"), "udaddy: starting server")
			r := runCmd(t, topo.B.NS.Command(ctx, binary, "udaddy", "--dev", topo.B.Name, "--link", tc.link, "-s", tc.addr,
				"-c", tc.conns, "-C", "5", "-t", "0x10"))
			awaitServer(t, ctx, done, r, so, se)
			wantCli := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n" +
				"data transfers complete\ntest complete\nreturn status 0\n"
			wantSrv := "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\n" +
				"test complete\nreturn status 0\n"
			if r.stdout != wantCli || so.String() != wantSrv {
				t.Errorf("client:\n%s\nwant:\n%s\nserver:\n%s\nwant:\n%s", r.stdout, wantCli, so.String(), wantSrv)
			}
		})
	}
	// An rping server answers for A: RDMA_PS_UDP port 7174 is not served
	// there (SIDR_REP status 1, unsupported); one that never answers ends
	// with -110 once --connect-timeout passes.
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	startRpingServer(t, ctx, topo.A.NS.Command(ctx, binary, "rping", "--dev", topo.A.Name, "-s", "-d"))
	r := runCmd(t, topo.B.NS.Command(ctx, binary, "udaddy", "--dev", topo.B.Name, "-s", topo.A.IPv4.String()))
	want := "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\ntest complete\nreturn status 1\n"
	if r.code != 1 || r.stdout != want {
		t.Errorf("no udaddy server: exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
	r = runCmd(t, topo.B.NS.Command(ctx, binary, "udaddy", "--dev", topo.B.Name, "-s", "198.51.100.99", "--connect-timeout", "300ms"))
	want = "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: -110\ntest complete\nreturn status -110\n"
	if r.code != 1 || r.stdout != want {
		t.Errorf("no answer: exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
}
