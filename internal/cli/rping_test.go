package cli

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

func TestRpingFill(t *testing.T) {
	b := make([]byte, 64)
	fillRping(b, 0, 'A')
	if got := string(cString(b)); got != "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr" {
		t.Fatalf("ping 0: %q", got)
	}
	fillRping(b, 9, 'J')
	if got := string(cString(b)); got != "rdma-ping-9: JKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzA" {
		t.Fatalf("ping 9: %q", got)
	}
}

func TestRpingUsage(t *testing.T) {
	for _, args := range [][]string{
		{"rping", "--dev", "lo"},                             // neither -s nor -c
		{"rping", "--dev", "lo", "-s", "-c"},                 // both
		{"rping", "--dev", "lo", "-c"},                       // client without -a
		{"rping", "--dev", "lo", "-s", "-S", "8"},            // too small
		{"rping", "--dev", "lo", "-c", "-a", "x", "-C", "1"}, // not an address
	} {
		if r := runBinary(t, args...); r.code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage): %s", args, r.code, r.stderr)
		}
	}
}

// TestPrivilegedRping: xdproce rping server and client (the real binary) in
// two namespaces over AF_XDP: -C 5 pings of -S 64 and 4096 with -v -V, the
// server's and the client's lines as rping prints them, and the server's
// capture shows the CM exchange and rping's loop (READ and WRITE).
func TestPrivilegedRping(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	for _, size := range []int{64, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			capPath := filepath.Join(t.TempDir(), "rping.pcapng")
			so, se, done := startRpingServer(t, ctx, topo.A.NS.Command(ctx, binary, "rping", "--dev", topo.A.Name, "--link", "xsk",
				"-s", "-a", topo.A.IPv4.String(), "-v", "-d", "-S", fmt.Sprint(size), "--capture", capPath))
			cli := topo.B.NS.Command(ctx, binary, "rping", "--dev", topo.B.Name, "--link", "xsk", "-c", "-a", topo.A.IPv4.String(),
				"-C", "5", "-S", fmt.Sprint(size), "-v", "-V")
			r := runCmd(t, cli)
			awaitServer(t, ctx, done, r, so, se)
			buf := make([]byte, size)
			var want, wantSrv strings.Builder
			for i := range 5 {
				fillRping(buf, i, byte('A'+i))
				fmt.Fprintf(&want, "ping data: %s\n", cString(buf))
				fmt.Fprintf(&wantSrv, "server ping data: %s\n", cString(buf))
			}
			if r.stdout != want.String() {
				t.Errorf("client stdout:\n%s\nwant:\n%s", r.stdout, want.String())
			}
			if so.String() != wantSrv.String() {
				t.Errorf("server stdout:\n%s\nwant:\n%s", so.String(), wantSrv.String())
			}
			if !strings.Contains(se.String(), "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n") ||
				!strings.Contains(r.stderr, "client DISCONNECT EVENT...") {
				t.Errorf("stderr: server %q, client %q", se.String(), r.stderr)
			}
			d := runBinary(t, "dump", capPath)
			if size == 64 {
				// rping's loop as rxe's capture has it: the RC requests
				// (no ACKs) of the first two pings, by direction.
				rxe := runBinary(t, "dump", "../../testdata/rxe/rdmacm_rping.pcap")
				want, got := rcSequence(rxe.stdout, "192.0.2.11"), rcSequence(d.stdout, topo.A.IPv4.String())
				if len(want) != 14 || len(got) < 14 || !slices.Equal(want, got[:14]) {
					t.Errorf("RC sequence of two pings:\n got %q\nwant %q (rxe)\n%s", got, want, d.stdout)
				}
			}
			for _, w := range []string{"CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP", "RDMA_READ_REQUEST", "RDMA_WRITE"} {
				if !strings.Contains(d.stdout, w) {
					t.Errorf("server capture has no %s:\n%s", w, d.stdout)
				}
			}
		})
	}
}

// startRpingServer starts an rping server and waits until it listens; its
// stdout, stderr and the channel its exit comes on (awaitServer's).
func startRpingServer(t *testing.T, ctx context.Context, srv *exec.Cmd) (so, se *syncBuffer, done chan error) {
	t.Helper()
	return startServerAt(t, ctx, srv, "rping server listening")
}

// startServerAt starts a server and waits until its output (standard
// output or error) has ready (the line it prints once it listens).
func startServerAt(t *testing.T, ctx context.Context, srv *exec.Cmd, ready string) (so, se *syncBuffer, done chan error) {
	t.Helper()
	so, se = new(syncBuffer), new(syncBuffer)
	srv.Stdout, srv.Stderr = so, se
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- srv.Wait() }()
	t.Cleanup(func() { srv.Process.Kill(); <-done; done <- nil })
	for !strings.Contains(so.String()+se.String(), ready) {
		select {
		case err := <-done:
			done <- err // for the cleanup, which waits for it
			t.Fatalf("server exited (%v): %s%s", err, so.String(), se.String())
		case <-ctx.Done():
			t.Fatalf("server not listening: %s%s", so.String(), se.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return so, se, done
}

// rcSequence lists the RC packets other than ACKs of a dump as "server
// OPCODE" or "client OPCODE" (server: the source address is server).
func rcSequence(dump, server string) []string {
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(dump, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && (f[2] == "in" || f[2] == "out") { // a pcapng capture's direction column
			f = slices.Delete(f, 2, 3)
		}
		if len(f) < 6 || !strings.HasPrefix(f[5], "RC_") || f[5] == "RC_ACKNOWLEDGE" {
			continue
		}
		who := "client"
		if strings.HasPrefix(f[2], server+":") {
			who = "server"
		}
		// A resend (the same direction, queue pair and PSN again: a fast
		// retransmission when an ACK came late) is not a new request.
		if i := slices.Index(f, "psn"); i > 0 && i+1 < len(f) && len(f) > 7 {
			key := who + " " + f[7] + " " + f[i+1]
			if seen[key] {
				continue
			}
			seen[key] = true
		}
		out = append(out, who+" "+f[5])
	}
	return out
}
