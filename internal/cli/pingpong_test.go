package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

func TestPingpongUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"pingpong"}, "--dev IF is required"},
		{[]string{"pingpong", "--dev", "lo", "a", "b"}, "want at most one HOST"},
		{[]string{"pingpong", "--dev", "lo", "-s", "0"}, "-s 0: want 1 byte"},
		{[]string{"pingpong", "--dev", "lo", "-n", "0"}, "-n 0: want 1 to 32768"},
		{[]string{"pingpong", "--dev", "lo", "-n", "100000"}, "-n 100000: want 1 to 32768"},
		{[]string{"pingpong", "--dev", "lo", "-m", "1500"}, "-m 1500: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"pingpong", "--dev", "lo", "-p", "70000"}, "-p 70000"},
		{[]string{"pingpong", "--dev", "lo", "-l", "16"}, "-l 16"},
		{[]string{"pingpong", "--dev", "lo", "-i", "2"}, "-i 2: xdproce devices have one port"},
		{[]string{"pingpong", "--dev", "lo", "-g", "x"}, `invalid value "x" for flag -g`},
		{[]string{"pingpong", "--dev", "lo", "-d", "rxe0"}, "flag provided but not defined: -d"},
	} {
		oneErrorLine(t, strings.Join(tt.args, " "), runBinary(t, tt.args...), 2, tt.want)
	}
	oneErrorLine(t, "pingpong on a missing interface", runBinary(t, "pingpong", "--dev", "nosuch0"), 1, `unknown interface "nosuch0"`)
	if r := runBinary(t, "pingpong", "-g", "1", "-s", "64", "-h"); r.code != 0 || !strings.Contains(r.stdout, "ibv_rc_pingpong") {
		t.Errorf("pingpong -h: exit %d, %q", r.code, r.stdout)
	}
}

// pingpongLines are ibv_rc_pingpong's output lines, parsed.
type pingpongLines struct {
	local, remote string // the address after "LID"
	bytes, iters  string // "2560 bytes in", "20 iters in"
}

var (
	ppLocal  = regexp.MustCompile(`(?m)^  local address:  (LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID \S+)$`)
	ppRemote = regexp.MustCompile(`(?m)^  remote address: (LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID \S+)$`)
	ppBytes  = regexp.MustCompile(`(?m)^(\d+ bytes in) [0-9.]+ seconds = [0-9.]+ Mbit/sec$`)
	ppIters  = regexp.MustCompile(`(?m)^(\d+ iters in) [0-9.]+ seconds = [0-9.]+ usec/iter$`)
	retrans  = regexp.MustCompile(`retransmissions (\d+)`)
)

func parsePingpong(t *testing.T, who, out string) pingpongLines {
	t.Helper()
	var l pingpongLines
	for _, f := range []struct {
		re  *regexp.Regexp
		dst *string
	}{{ppLocal, &l.local}, {ppRemote, &l.remote}, {ppBytes, &l.bytes}, {ppIters, &l.iters}} {
		m := f.re.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("%s output lacks a line matching %s:\n%s", who, f.re, out)
			continue
		}
		*f.dst = m[1]
	}
	return l
}

// runPair runs the command words as server (in topo.A) and client (in
// topo.B, given A's address) with the same extra args and returns both
// outputs; both must exit 0 within 30 s.
func runPair(t *testing.T, topo *netlab.Topo, wrap func(ctx context.Context, ns *netlab.NS, args ...string) *exec.Cmd, words []string, common ...string) (srvOut, srvErr, cliOut, cliErr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	srv := wrap(ctx, topo.A.NS, append(append(words[:len(words):len(words)], "--dev", topo.A.Name), common...)...)
	var so, se bytes.Buffer
	srv.Stdout, srv.Stderr = &so, &se
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	t.Cleanup(func() { srv.Process.Kill(); <-done })
	cli := wrap(ctx, topo.B.NS, append(append(append(words[:len(words):len(words)], "--dev", topo.B.Name), common...), topo.A.IPv4.String())...)
	r := runCmd(t, cli)
	awaitServer(t, ctx, done, r, &so, &se)
	return so.String(), se.String(), r.stdout, r.stderr
}

// awaitServer waits for the server process (its Wait result on done, put
// back for the cleanup) after the client's run r, and fails the test unless
// both succeeded.
func awaitServer(t *testing.T, ctx context.Context, done chan error, r result, so, se fmt.Stringer) {
	t.Helper()
	var serr error
	select {
	case serr = <-done:
		done <- serr
	case <-ctx.Done():
		t.Fatalf("server still running; client exit %d: %s%s\nserver: %s%s", r.code, r.stdout, r.stderr, so.String(), se.String())
	}
	if r.code != 0 || serr != nil {
		t.Fatalf("client exit %d:\n%s%s\nserver %v:\n%s%s", r.code, r.stdout, r.stderr, serr, so.String(), se.String())
	}
}

// checkPingpong: both print ibv_rc_pingpong's lines, each one's remote
// address is the other's local one, the byte and iteration counts are
// the run's, and both name the retransmissions.
func checkPingpong(t *testing.T, size, iters int, srvOut, srvErr, cliOut, cliErr string) {
	t.Helper()
	t.Logf("server:\n%s%s", srvOut, srvErr)
	t.Logf("client:\n%s%s", cliOut, cliErr)
	s, c := parsePingpong(t, "server", srvOut), parsePingpong(t, "client", cliOut)
	if s.local == "" || s.local != c.remote || c.local != s.remote {
		t.Errorf("addresses: server %q / %q, client %q / %q", s.local, s.remote, c.local, c.remote)
	}
	for _, l := range []pingpongLines{s, c} {
		if want := fmt.Sprintf("%d bytes in", 2*size*iters); l.bytes != want {
			t.Errorf("%q, want %q", l.bytes, want)
		}
		if want := fmt.Sprintf("%d iters in", iters); l.iters != want {
			t.Errorf("%q, want %q", l.iters, want)
		}
	}
	for who, e := range map[string]string{"server": srvErr, "client": cliErr} {
		if !retrans.MatchString(e) {
			t.Errorf("%s stderr names no retransmission count: %q", who, e)
		}
	}
}

// TestPrivilegedPingpong: two xdproce pingpong processes (server and client)
// between namespaces over AF_XDP, 64 B and 3000 B (three packets at path MTU
// 1024), 20 iterations; the client's capture passes dump --verify.
func TestPrivilegedPingpong(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	plain := func(ctx context.Context, ns *netlab.NS, args ...string) *exec.Cmd {
		return ns.Command(ctx, binary, args...)
	}
	for _, size := range []int{64, 3000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			capPath := filepath.Join(t.TempDir(), "pp.pcapng")
			so, se, co, ce := runPair(t, topo, func(ctx context.Context, ns *netlab.NS, args ...string) *exec.Cmd {
				if ns == topo.B.NS {
					args = append(args, "--capture", capPath)
				}
				return plain(ctx, ns, args...)
			}, []string{"pingpong"}, "--link", "xsk", "-g", "1", "-s", fmt.Sprint(size), "-n", "20", "-m", "1024")
			checkPingpong(t, size, 20, so, se, co, ce)
			if !strings.Contains(ce, "over AF_XDP") || !strings.Contains(ce, "path MTU 1024") {
				t.Errorf("client stderr %q", ce)
			}
			// 20 messages each way of ceil(size/1024) packets, and their ACKs.
			v := runBinary(t, "dump", "--verify", capPath)
			pkts := 20 * 2 * ((size + 1023) / 1024)
			if v.code != 0 || strings.Count(v.stdout, "RC_SEND") < pkts {
				t.Errorf("dump --verify: exit %d, %d SEND lines, want %d: %s", v.code, strings.Count(v.stdout, "RC_SEND"), pkts, v.stderr)
			}
		})
	}
	// -m larger than the path MTU is lowered to it, with a note.
	t.Run("mtu4096", func(t *testing.T) {
		so, se, co, ce := runPair(t, topo, plain, []string{"pingpong"}, "--link", "xsk", "-s", "5000", "-n", "5", "-m", "4096")
		checkPingpong(t, 5000, 5, so, se, co, ce)
		if !strings.Contains(ce, "-m 4096 is more than the path MTU") {
			t.Errorf("client stderr %q", ce)
		}
	})
}

// TestPrivilegedPingpongUDP: the same between namespaces over --link udp,
// both processes running as nobody (the unprivileged path).
func TestPrivilegedPingpongUDP(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	work, err := os.MkdirTemp("", "xdproce-pingpong-udp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	bin := filepath.Join(work, "xdproce")
	if err := os.WriteFile(bin, mustRead(t, binary), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(work, 0o755)
	asNobody := func(ctx context.Context, ns *netlab.NS, args ...string) *exec.Cmd {
		return ns.Command(ctx, "setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, args...)...)
	}
	so, se, co, ce := runPair(t, topo, asNobody, []string{"pingpong"}, "--link", "udp", "-g", "1", "-s", "3000", "-n", "20")
	checkPingpong(t, 3000, 20, so, se, co, ce)
	if !strings.Contains(ce, "over UDP") || !strings.Contains(se, "over UDP") {
		t.Errorf("stderr does not name UDP: server %q, client %q", se, ce)
	}
}
