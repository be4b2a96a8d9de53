package cli

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

func TestMckeyUsage(t *testing.T) {
	for _, args := range [][]string{
		{"mckey", "--dev", "lo"},                                   // no group
		{"mckey", "--dev", "lo", "-m", "198.51.100.1"},             // not a multicast address
		{"mckey", "--dev", "lo", "-M", "ff12::1", "-b", "::1"},     // AF_IB
		{"mckey", "--dev", "lo", "-m", "239.1.2.3", "-p", "0x2"},   // RDMA_PS_IPOIB
		{"mckey", "--dev", "lo", "-m", "239.1.2.3", "-c", "0"},     // no connections
		{"mckey", "--dev", "lo", "-m", "239.1.2.3", "-b", "x"},     // not an address
		{"mckey", "--dev", "lo", "-m", "239.1.2.3", "-C", "-1"},    // negative count
		{"mckey", "--dev", "lo", "-m", "239.1.2.3", "extra-arg"},   // no arguments
		{"mckey", "--dev", "lo", "-m", "239.1.2.3", "--pause=-1s"}, // negative pause
	} {
		if r := runBinary(t, args...); r.code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage): %s", args, r.code, r.stderr)
		}
	}
}

// TestPrivilegedMckey: xdproce mckey receiving and sending (the real
// binary) in two namespaces: an IPv4 group over AF_XDP, the receiver with
// two queue pairs attached (each gets every datagram), and an IPv6 group
// over link/udp with a send-only sender. Both print mckey's lines, the
// receiver's interface is a member of the group while it runs, and the
// sender's capture holds its SENDs with immediate to QPN 0xffffff at the
// group, Q_Key 0x01234567, the immediate its QPN.
func TestPrivilegedMckey(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	for _, tc := range []struct {
		name, link, group, gid string
		recvQPs                int
		sendArgs               []string
	}{
		{"ipv4-xsk", "xsk", "239.7.8.9", "::ffff:239.7.8.9", 2, nil},
		{"ipv6-udp", "udp", "ff15::7:8:9", "ff15::7:8:9", 1, []string{"-o", "-l", "-b", topo.B.IPv6.String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			joined := "mckey: joined dgid: " + tc.gid + " mlid 0x0 sl 0\n"
			common := []string{"-m", tc.group, "-C", "5", "-S", "200", "--pause", "100ms", "--link", tc.link}
			so, se, done := startServerAt(t, ctx, topo.A.NS.Command(ctx, binary, append(append([]string{"mckey", "--dev", topo.A.Name},
				common...), "-c", fmt.Sprint(tc.recvQPs))...), joined)
			maddr, err := topo.A.NS.Command(ctx, "ip", "maddr", "show", "dev", topo.A.Name).CombinedOutput()
			if err != nil || !strings.Contains(string(maddr), " "+tc.group+"\n") {
				t.Errorf("the receiver's %s is no member of %s (%v):\n%s", topo.A.Name, tc.group, err, maddr)
			}
			capture := filepath.Join(t.TempDir(), "send.pcapng")
			r := runCmd(t, topo.B.NS.Command(ctx, binary, append(append([]string{"mckey", "--dev", topo.B.Name, "-s", "--capture", capture},
				common...), tc.sendArgs...)...))
			awaitServer(t, ctx, done, r, so, se)
			wantRecv := "mckey: starting server\nmckey: joining\n" + strings.Repeat(joined, tc.recvQPs) +
				"receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
			wantSend := "mckey: starting client\nmckey: joining\n" + joined +
				"initiating data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
			if r.stdout != wantSend || so.String() != wantRecv {
				t.Errorf("sender:\n%s\nwant:\n%s\nreceiver:\n%s\nwant:\n%s", r.stdout, wantSend, so.String(), wantRecv)
			}
			checkMckeyCapture(t, ctx, capture, tc.group, 5, 200)
		})
	}
}

// checkMckeyCapture: the capture holds exactly n SENDs with immediate of
// size bytes to the group's QPN 0xffffff with Q_Key 0x01234567, each with
// its sending queue pair's number as the immediate, and nothing else to
// the group.
func checkMckeyCapture(t *testing.T, ctx context.Context, capture, group string, n, size int) {
	t.Helper()
	out, err := exec.CommandContext(ctx, binary, "dump", "--verify", capture).CombinedOutput()
	if err != nil {
		t.Fatalf("dump --verify: %v\n%s", err, out)
	}
	dst := "→ " + group + ":4791 "
	if strings.Contains(group, ":") {
		dst = "→ [" + group + "]:4791 "
	}
	sends := 0
	for l := range strings.SplitSeq(string(out), "\n") {
		if !strings.Contains(l, dst) {
			continue
		}
		var src, imm uint32
		i := strings.Index(l, "srcqp ")
		if i >= 0 {
			fmt.Sscanf(l[i:], "srcqp %v imm %v", &src, &imm)
		}
		if !strings.Contains(l, "UD_SEND_ONLY_WITH_IMMEDIATE qpn 0xffffff ") || !strings.Contains(l, "qkey 0x01234567 ") ||
			!strings.Contains(l, fmt.Sprintf("payload %d ", size)) || src == 0 || imm != src {
			t.Errorf("a frame to the group that is not a SEND with immediate (the sender's QPN) to QPN 0xffffff, Q_Key 0x01234567, %d B:\n%s", size, l)
		}
		sends++
	}
	if sends != n {
		t.Errorf("%d frames to %s in the sender's capture, want %d:\n%s", sends, group, n, out)
	}
}
