package cli

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestBenchPeerBuffer: perftest's requesters step the remote address through
// a cycle buffer (a page) for messages up to half of it, so the buffer a
// bench peer exposes covers a 64 KiB cycle beyond its start for small
// messages (ib_atomic_bw against xdproce's server failed with a remote access
// error while it was 64 bytes), and is not doubled for large ones.
func TestBenchPeerBuffer(t *testing.T) {
	la, _, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	local := &net.TCPAddr{IP: net.ParseIP("198.51.100.1"), Port: 1}
	for _, tc := range []struct {
		test      cm.PerftestTest
		size, min int
		max       int
	}{
		{cm.AtomicBW, 8, 64<<10 + 8, 1 << 20},
		{cm.WriteBW, 64, 64<<10 + 64, 1 << 20},
		{cm.SendLat, 2, 64<<10 + 2, 1 << 20},
		{cm.ReadBW, 1 << 20, 1 << 20, 1 << 20},
		{cm.SendLat, 1 << 20, 2 << 20, 2 << 20},
	} {
		b := &bench{dev: dev, test: tc.test, size: tc.size, iters: 10, qps: 1}
		p, err := b.peer(local)
		if err != nil {
			t.Fatal(err)
		}
		if n := p.MR.Len(); n < tc.min || n > tc.max {
			t.Errorf("%v %d B: buffer of %d bytes, want %d to %d", tc.test, tc.size, n, tc.min, tc.max)
		}
		if p.MR.Addr()%8 != 0 {
			t.Errorf("%v: buffer at %#x is not 8-byte aligned", tc.test, p.MR.Addr())
		}
	}
}

func TestBenchPerftestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "write", "--perftest", "--dev", "lo", "--qps", "2"}, "--perftest runs one queue pair"},
		{[]string{"bench", "write", "--perftest", "--json", "--dev", "lo"}, "--perftest and --json exclude each other"},
		{[]string{"bench", "atomic", "--perftest", "--dev", "lo", "--atomic-type", "XOR"}, `--atomic-type "XOR": want FETCH_AND_ADD or CMP_AND_SWAP`},
		{[]string{"bench", "write", "--perftest", "--dev", "lo", "--atomic-type", "CMP_AND_SWAP"}, "--atomic-type is for the atomic test"},
		{[]string{"bench", "atomic", "--dev", "lo", "--atomic-type", "CMP_AND_SWAP", "--atomic-op", "fetch_add"}, "disagree"},
		{[]string{"bench", "atomic", "--perftest=maybe", "--dev", "lo"}, `invalid boolean value "maybe" for -perftest`},
	} {
		oneErrorLine(t, strings.Join(tt.args, " "), runBinary(t, tt.args...), 2, tt.want)
	}
	// The interop harness probes for the flags with -h.
	for _, args := range [][]string{{"bench", "write", "--perftest", "-h"}, {"bench", "atomic", "--perftest", "--atomic-type", "FETCH_AND_ADD", "-h"}} {
		if r := runBinary(t, args...); r.code != 0 || !strings.Contains(r.stdout, "--atomic-type") {
			t.Errorf("%q: exit %d", args, r.code)
		}
	}
}

var (
	ptLocal  = regexp.MustCompile(`(?m)^ local address: (LID 0000 QPN 0x[0-9a-f]+ PSN 0x[0-9a-f]+.*)\n GID: ([0-9:]+)$`)
	ptRemote = regexp.MustCompile(`(?m)^ remote address: (LID 0000 QPN 0x[0-9a-f]+ PSN 0x[0-9a-f]+.*)\n GID: ([0-9:]+)$`)
)

// TestPrivilegedBenchPerftest: two xdproce bench --perftest processes
// (server and client) between namespaces over AF_XDP, for every test: both
// print perftest's title, address lines (each one's remote address is the
// other's local one) and result row, both name the retransmissions, and the
// client's capture passes dump --verify.
func TestPrivilegedBenchPerftest(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	for _, tc := range []struct {
		test, title string
		size, iters int
		extra       []string
		srvRow      bool // the server prints a result row too
	}{
		{"write", "RDMA_Write BW Test", 4096, 100, nil, true},
		{"read", "RDMA_Read BW Test", 65536, 20, nil, true},
		{"send", "Send BW Test", 65536, 20, nil, true},
		{"atomic", "Atomic FETCH_AND_ADD BW Test", 8, 100, []string{"--atomic-type", "FETCH_AND_ADD"}, true},
		{"atomic", "Atomic CMP_AND_SWAP BW Test", 8, 100, []string{"--atomic-type", "CMP_AND_SWAP"}, true},
		{"lat", "Send Latency Test", 64, 100, nil, false},
	} {
		t.Run(tc.title, func(t *testing.T) {
			capPath := filepath.Join(t.TempDir(), "bench.pcapng")
			wrap := func(ctx context.Context, ns *netlab.NS, args ...string) *exec.Cmd {
				if ns == topo.B.NS {
					args = append(args, "--capture", capPath)
				}
				return ns.Command(ctx, binary, args...)
			}
			args := append([]string{"--link", "xsk", "--size", fmt.Sprint(tc.size), "--iters", fmt.Sprint(tc.iters)}, tc.extra...)
			so, se, co, ce := runPair(t, topo, wrap, []string{"bench", tc.test, "--perftest"}, args...)
			t.Logf("server:\n%s%s", so, se)
			t.Logf("client:\n%s%s", co, ce)
			row := regexp.MustCompile(fmt.Sprintf(`(?m)^ %d\s+%d\s+[0-9.]+\s+[0-9.]+`, tc.size, tc.iters))
			for _, o := range []struct {
				who, out, err string
				row           bool
			}{{"server", so, se, tc.srvRow}, {"client", co, ce, true}} {
				if !strings.Contains(o.out, "\n"+strings.Repeat(" ", 20)+tc.title+"\n") || !strings.Contains(o.out, " Mtu             : 1024[B]\n") {
					t.Errorf("%s: no title %q or MTU line", o.who, tc.title)
				}
				if o.row && !row.MatchString(o.out) {
					t.Errorf("%s printed no result row for %d B x%d", o.who, tc.size, tc.iters)
				}
				if !retrans.MatchString(o.err) || !strings.Contains(o.err, "path MTU 1024") {
					t.Errorf("%s stderr names no retransmission count: %q", o.who, o.err)
				}
			}
			sl, sr, cl, cr := ptLocal.FindStringSubmatch(so), ptRemote.FindStringSubmatch(so), ptLocal.FindStringSubmatch(co), ptRemote.FindStringSubmatch(co)
			if sl == nil || sr == nil || cl == nil || cr == nil {
				t.Fatalf("address lines missing")
			}
			if sl[1] != cr[1] || sl[2] != cr[2] || cl[1] != sr[1] || cl[2] != sr[2] {
				t.Errorf("addresses: server %q, client %q", sl[1:], cl[1:])
			}
			if want := "00:00:00:00:00:00:00:00:00:00:255:255:198:51:100:01"; sl[2] != want {
				t.Errorf("server GID %s, want %s", sl[2], want)
			}
			if v := runBinary(t, "dump", "--verify", capPath); v.code != 0 || strings.Count(v.stdout, "\n") < tc.iters {
				t.Errorf("dump --verify: exit %d, %d lines: %s", v.code, strings.Count(v.stdout, "\n"), v.stderr)
			}
		})
	}
}
