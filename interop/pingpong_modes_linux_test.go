package interop

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The rows of rdma-core's other pingpong tools against `xdproce pingpong --uc/--ud/--srq`, and
// ibv_rc_pingpong over IPv6.

// ppAddr matches a pingpong tool's address line (ibv_ud_pingpong's local line has a colon
// before GID where the others have a comma).
var ppAddr = regexp.MustCompile(`(?m)^  (local|remote) address: +LID 0x[0-9a-f]{4}, QPN (0x[0-9a-f]{6}), PSN (0x[0-9a-f]{6})[:,] GID (\S+)$`)

// ppAddrs returns the (QPN, PSN, GID) of a pingpong output's local and remote address lines,
// in order.
func ppAddrs(out string) (local, remote []string) {
	for _, m := range ppAddr.FindAllStringSubmatch(out, -1) {
		a := strings.Join(m[2:], " ")
		if m[1] == "local" {
			local = append(local, a)
		} else {
			remote = append(remote, a)
		}
	}
	return local, remote
}

// checkPingpong checks a pingpong run's two outputs: each names the byte and iteration counts
// of size×iters, and each side's remote addresses are the other's local ones, qps of them, in
// order (ibv_srq_pingpong: one per queue pair), with the GIDs given.
func checkPingpong(t *testing.T, tool string, size, iters, qps int, toolGID, xdGID string) func(t *testing.T, toolOut, xdOut string) {
	want := []string{fmt.Sprintf("%d bytes in ", 2*size*iters), fmt.Sprintf("%d iters in ", iters)}
	return func(t *testing.T, toolOut, xdOut string) {
		for _, w := range want {
			if !strings.Contains(toolOut, w) {
				t.Errorf("%s output lacks %q:\n%s", tool, w, toolOut)
			}
			if !strings.Contains(xdOut, w) {
				t.Errorf("xdproce pingpong output lacks %q (it prints %s's lines):\n%s", w, tool, xdOut)
			}
		}
		tl, tr := ppAddrs(toolOut)
		xl, xr := ppAddrs(xdOut)
		if len(tl) != qps || len(xl) != qps || strings.Join(tl, "|") != strings.Join(xr, "|") || strings.Join(xl, "|") != strings.Join(tr, "|") {
			t.Errorf("address lines (QPN PSN GID), want %d each way, each side's remote = the other's local:\n%s local %q\n%s remote %q\nxdproce local %q\nxdproce remote %q",
				qps, tool, tl, tool, tr, xl, xr)
			return
		}
		for _, a := range tl {
			if !strings.HasSuffix(a, " "+toolGID) {
				t.Errorf("%s's local address %q: want GID %s", tool, a, toolGID)
			}
		}
		for _, a := range xl {
			if !strings.HasSuffix(a, " "+xdGID) {
				t.Errorf("xdproce's local address %q: want GID %s", a, xdGID)
			}
		}
	}
}

// TestPrivilegedInteropPingpongModes: ibv_uc_pingpong (3000 B: three packets at PMTU 1024),
// ibv_ud_pingpong (1024 B, one full packet), ibv_srq_pingpong (16 queue pairs on one SRQ) against
// `xdproce pingpong --uc/--ud/--srq`, and ibv_rc_pingpong over IPv6 (the tap's 2001:db8::
// addresses and rxe0's IPv6 GID; the TCP exchange too where xdproce listens: ibv_rc_pingpong
// listens on IPv4 only), each with xdproce as server and as client over AF_XDP.
func TestPrivilegedInteropPingpongModes(t *testing.T) {
	suiteEnabled(t)
	var note string
	recordIf(t, true, "pingpong modes", "every run", "both", "xsk", &note)
	needCommand(t, xdproceBin(t), &note, "pingpong", "--srq")
	g := needGuest(t) // boots the guest once, before the runs
	type tc struct {
		tool, mode  string
		size, iters int
		qps         int
		ipv6        bool
		toolX, xdX  []string // extra arguments
	}
	cases := []tc{
		{tool: "ibv_uc_pingpong", mode: "--uc", size: 3000, iters: 20, qps: 1},
		{tool: "ibv_ud_pingpong", mode: "--ud", size: 1024, iters: 20, qps: 1},
		{tool: "ibv_srq_pingpong", mode: "--srq", size: 2000, iters: 50, qps: 16, toolX: []string{"-q", "16", "-r", "64"}, xdX: []string{"-q", "16", "-r", "64"}},
		{tool: "ibv_rc_pingpong", size: 3000, iters: 20, qps: 1, ipv6: true},
	}
	for _, c := range cases {
		for _, srv := range []bool{true, false} {
			op := fmt.Sprintf("SEND %d B x%d", c.size, c.iters)
			if c.qps > 1 {
				op += fmt.Sprintf(", %d QPs", c.qps)
			}
			fam := "ipv4"
			if c.ipv6 {
				op += " IPv6"
				fam = "ipv6"
			}
			t.Run(fmt.Sprintf("%s/%s/xdproce-%s", c.tool, fam, role(srv)), func(t *testing.T) {
				g = needGuest(t) // again: reboots the guest if the path to it died
				note := ""
				record(t, c.tool, op, role(srv), "xsk", &note)
				toolGID, xdGID := "$XI_GID_INDEX", "1"
				toolAddr, xdAddr := "::ffff:"+g.guestIP, "::ffff:"+g.hostIP
				if c.ipv6 {
					if g.gid6Index < 0 {
						t.Fatalf("the guest has no IPv6 GID (guest.sh up --guest-ip6; see %s/env)", g.state)
					}
					toolGID, xdGID = fmt.Sprint(g.gid6Index), fmt.Sprint(xdGID6Index)
					toolAddr, xdAddr = g.guestIP6, g.hostIP6
				}
				toolArgs := []string{"-d", "rxe0", "-g", toolGID, "-s", fmt.Sprint(c.size), "-n", fmt.Sprint(c.iters)}
				if c.mode != "--ud" { // ibv_ud_pingpong has no -m: a UD message is one packet
					toolArgs = append(toolArgs, "-m", "1024")
				}
				xdArgs := []string{"pingpong", "-g", xdGID, "-s", fmt.Sprint(c.size), "-n", fmt.Sprint(c.iters), "-m", "1024"}
				need := []string{"pingpong"}
				if c.mode != "" {
					xdArgs = append(xdArgs, c.mode)
					need = append(need, c.mode)
				}
				p := pair{
					tool:      c.tool,
					toolArgs:  append(toolArgs, c.toolX...),
					xdArgs:    append(xdArgs, c.xdX...),
					needWords: need,
					xdServer:  srv, ipv6: c.ipv6, link: "xsk", timeout: 90 * time.Second,
					check: checkPingpong(t, c.tool, c.size, c.iters, c.qps, toolAddr, xdAddr),
				}
				p.note = &note
				p.run(t, g)
			})
		}
	}
}
