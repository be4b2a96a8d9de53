package cli

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

func TestUcmatoseUsage(t *testing.T) {
	for _, args := range [][]string{
		{"ucmatose", "--dev", "lo", "-P", "ib"},       // not RDMA_PS_TCP
		{"ucmatose", "--dev", "lo", "-c", "0"},        // no connections
		{"ucmatose", "--dev", "lo", "-p", "70000"},    // not a port
		{"ucmatose", "--dev", "lo", "-s", "x"},        // not an address
		{"ucmatose", "--dev", "lo", "extra-argument"}, // no arguments
	} {
		if r := runBinary(t, args...); r.code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage): %s", args, r.code, r.stderr)
		}
	}
}

// TestPrivilegedUcmatose: xdproce ucmatose server and client (the real
// binary) in two namespaces over AF_XDP: three connections, ten 100-byte
// SENDs each way on each, the server's disconnect, cmatose's lines on both
// sides; a client to a port nobody listens on prints cmatose's REJECTED
// line with reason 8 (invalid service ID) and exits non-zero.
func TestPrivilegedUcmatose(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	runCmatose(t, ctx, topo, []string{"-c", "3", "-m"}, []string{"-c", "3", "-t", "0x10"})
	// An rping server answers for A: port 7471 has no listener (REJ
	// invalid service ID, reason 8).
	startRpingServer(t, ctx, topo.A.NS.Command(ctx, binary, "rping", "--dev", topo.A.Name, "-s", "-d"))
	r := runCmd(t, topo.B.NS.Command(ctx, binary, "ucmatose", "--dev", topo.B.Name, "-s", topo.A.IPv4.String()))
	want := "cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\ntest complete\nreturn status 8\n"
	if r.code != 1 || r.stdout != want {
		t.Errorf("no ucmatose server: exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
}

// runCmatose runs an xdproce ucmatose server on topo's A (with srvArgs)
// and a client on B (with cliArgs), both over AF_XDP, and checks that both
// succeed and print cmatose's lines (the migration line when the server
// has -m); it returns their stderr.
func runCmatose(t *testing.T, ctx context.Context, topo *netlab.Topo, srvArgs, cliArgs []string) (srvErr, cliErr string) {
	t.Helper()
	so, se, done := startServerAt(t, ctx, topo.A.NS.Command(ctx, binary, append([]string{"ucmatose", "--dev", topo.A.Name, "--link", "xsk"},
		srvArgs...)...), "cmatose: starting server")
	r := runCmd(t, topo.B.NS.Command(ctx, binary, append([]string{"ucmatose", "--dev", topo.B.Name, "--link", "xsk", "-s", topo.A.IPv4.String()},
		cliArgs...)...))
	awaitServer(t, ctx, done, r, so, se)
	migrate := ""
	if slices.Contains(srvArgs, "-m") {
		migrate = "migrating to new event channel\n"
	}
	wantCli := "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
	wantSrv := "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\n" +
		"data transfers complete\n" + migrate + "cmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	if r.stdout != wantCli || so.String() != wantSrv {
		t.Errorf("client:\n%s\nwant:\n%s\nserver:\n%s\nwant:\n%s", r.stdout, wantCli, so.String(), wantSrv)
	}
	return se.String(), r.stderr
}
