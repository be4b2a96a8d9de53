package cli

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

var ppAddr = regexp.MustCompile(`(?m)^  (local|remote) address: +(LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID \S+)$`)

// addrLines returns the local and remote address lines of a pingpong output, in order.
func addrLines(out string) (local, remote []string) {
	for _, m := range ppAddr.FindAllStringSubmatch(out, -1) {
		if m[1] == "local" {
			local = append(local, m[2])
		} else {
			remote = append(remote, m[2])
		}
	}
	return local, remote
}

func TestPingpongModeUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"pingpong", "--dev", "lo", "--ud", "--srq"}, "give at most one of --uc, --ud and --srq"},
		{[]string{"pingpong", "--dev", "lo", "--srq", "-q", "0"}, "-q 0: want 1 to 256"},
		{[]string{"pingpong", "--dev", "lo", "--srq", "-q", "20", "-r", "10"}, "-r 10: want 20"},
		{[]string{"pingpong", "--dev", "lo", "--ud", "-s", "2048", "-m", "1024"}, "-s 2048: a UD message fits one packet"},
	} {
		oneErrorLine(t, strings.Join(tt.args, " "), runBinary(t, tt.args...), 2, tt.want)
	}
}

// TestPrivilegedPingpongModes: two xdproce pingpong processes between namespaces over AF_XDP
// with --uc, --ud and --srq: each prints its tool's lines (one address line per queue pair
// each way for --srq, the other side's local addresses as its remote ones, in order), the
// byte and iteration counts of the run, and the client's capture holds the messages of the
// run's transport.
func TestPrivilegedPingpongModes(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	for _, tc := range []struct {
		mode       string
		size, iter int
		qps        int
		opcode     string // the SEND opcode dump prints
		args       []string
	}{
		{"--uc", 3000, 20, 1, "UC_SEND", nil},
		{"--ud", 1000, 20, 1, "UD_SEND", nil},
		{"--srq", 2000, 100, 16, "RC_SEND", []string{"-r", "64"}},
		{"--srq", 64, 40, 3, "RC_SEND", []string{"-q", "3", "-r", "8"}},
	} {
		t.Run(fmt.Sprintf("%s-%d", strings.TrimPrefix(tc.mode, "--"), tc.qps), func(t *testing.T) {
			capPath := t.TempDir() + "/pp.pcapng"
			wrap := func(ctx context.Context, ns *netlab.NS, args ...string) *exec.Cmd {
				if ns == topo.B.NS {
					args = append(args, "--capture", capPath)
				}
				return ns.Command(ctx, binary, args...)
			}
			common := append([]string{"--link", "xsk", "-g", "1", tc.mode, "-s", fmt.Sprint(tc.size), "-n", fmt.Sprint(tc.iter), "-m", "1024"}, tc.args...)
			so, se, co, ce := runPair(t, topo, wrap, []string{"pingpong"}, common...)
			t.Logf("server:\n%s%s\nclient:\n%s%s", so, se, co, ce)
			sl, sr := addrLines(so)
			cl, cr := addrLines(co)
			if len(sl) != tc.qps || len(cl) != tc.qps || strings.Join(sl, "|") != strings.Join(cr, "|") || strings.Join(cl, "|") != strings.Join(sr, "|") {
				t.Errorf("address lines: server %q / %q, client %q / %q", sl, sr, cl, cr)
			}
			for who, out := range map[string]string{"server": so, "client": co} {
				if m := ppBytes.FindStringSubmatch(out); m == nil || m[1] != fmt.Sprintf("%d bytes in", 2*tc.size*tc.iter) {
					t.Errorf("%s bytes line %q", who, m)
				}
				if m := ppIters.FindStringSubmatch(out); m == nil || m[1] != fmt.Sprintf("%d iters in", tc.iter) {
					t.Errorf("%s iters line %q", who, m)
				}
				if n := strings.Count(out, "\n"); n != 2*tc.qps+2 {
					t.Errorf("%s printed %d lines, want %d", who, n, 2*tc.qps+2)
				}
			}
			v := runBinary(t, "dump", "--verify", capPath)
			pkts := 2 * tc.iter * ((tc.size + 1023) / 1024)
			if got := strings.Count(v.stdout, tc.opcode); v.code != 0 || got < pkts {
				t.Errorf("dump --verify: exit %d, %d %s lines, want at least %d: %s", v.code, got, tc.opcode, pkts, v.stderr)
			}
		})
	}
}
