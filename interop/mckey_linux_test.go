package interop

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mckeyGroup is the group both sides join (rxe has no IPv6 multicast on RoCEv2).
const mckeyGroup = "239.1.2.3"

// TestPrivilegedInteropMckey: librdmacm's mckey in the guest against `xdproce mckey`, UD
// multicast through rdma_join_multicast (an IGMP join and the queue pair attached to
// ::ffff:239.1.2.3, no MAD; SENDs with immediate to QPN 0xFFFFFF, Q_Key 0x01234567), xdproce
// receiving (mckey's "server") and sending ("client") over AF_XDP: 10 datagrams of 100 B to
// one queue pair, and 10 of 1024 B (a full rxe MTU) to each of two.
func TestPrivilegedInteropMckey(t *testing.T) {
	suiteEnabled(t)
	var note string
	recordIf(t, true, "mckey", "every run", "both", "xsk", &note)
	needCommand(t, xdproceBin(t), &note, "mckey") // before booting a guest for nothing
	needGuest(t)
	for _, c := range []struct {
		op, args string
		conns    int
		size     string
	}{
		{"UD mcast 100 B x10", "-C 10", 1, "100"},
		{"UD mcast 1024 B x10, 2 QPs", "-c 2 -C 10 -S 1024", 2, "1024"},
	} {
		for _, recv := range []bool{true, false} {
			t.Run(fmt.Sprintf("c%d/xdproce-%s", c.conns, role(recv)), func(t *testing.T) {
				mckeyRow(t, c.op, c.args, c.size, recv)
			})
		}
	}
}

// mckeyRow runs one row: the receiver first (until it has joined), then the sender. Both
// must print mckey's lines; xdproce's capture must pass dump --verify and hold at least 10
// of the row's SENDs to the group; while xdproce receives, its namespace is a member of the
// group on the tap, and while it sends, the guest is.
func mckeyRow(t *testing.T, op, args, size string, xdRecv bool) {
	g := needGuest(t) // again: reboots the guest if the path to it died
	note := ""
	record(t, "mckey", op, role(xdRecv), "xsk", &note)
	bin := xdproceBin(t)
	capture := filepath.Join(t.TempDir(), "run.pcapng")
	xd := append([]string{bin, "mckey", "--dev", g.tap, "--link", "xsk", "--capture", capture, "-m", mckeyGroup}, strings.Fields(args)...)
	tool := "exec stdbuf -oL mckey -m " + mckeyGroup + " -b " + g.guestIP + " " + args // -b: the guest has no route to the group
	const joined = "mckey: joined dgid: ::ffff:" + mckeyGroup + " mlid 0x0 sl 0"
	var toolOut, xdOut, member string
	var rc int
	var terr, xerr error
	if xdRecv {
		x := g.hostStart(t, xd...)
		if err := waitHost(x, 30*time.Second, joined); err != nil {
			t.Fatalf("xdproce mckey: %v:\n%s", err, x.output())
		}
		out, _ := exec.Command("ip", "-n", g.netns, "maddr", "show", "dev", g.tap).CombinedOutput()
		member = string(out)
		toolOut, rc, terr = g.start(t, tool+" -s").wait(60 * time.Second)
		xdOut, xerr = x.wait(30 * time.Second)
	} else {
		j := g.start(t, tool)
		if out, ok := j.waitOutput(60*time.Second, func(s string) bool { return strings.Contains(s, joined) }); !ok {
			t.Fatalf("guest mckey did not join:\n%s", out)
		}
		member = g.run(t, 30*time.Second, "ip maddr show dev $XI_NIC")
		xdOut, xerr = g.hostStart(t, append(xd, "-s")...).wait(60 * time.Second)
		toolOut, rc, terr = j.wait(30 * time.Second)
	}
	if terr != nil || rc != 0 || xerr != nil {
		note = fmt.Sprintf("mckey rc %d %v; xdproce %v", rc, terr, xerr)
		t.Fatalf("mckey: rc %d %v\n%s\nxdproce: %v\n%s", rc, terr, toolOut, xerr, xdOut)
	}
	if !strings.Contains(member, "inet  "+mckeyGroup) {
		t.Errorf("the receiver's interface is no member of %s while it runs:\n%s", mckeyGroup, member)
	}
	for who, out := range map[string]string{"mckey": toolOut, "xdproce mckey": xdOut} {
		for _, w := range []string{joined, "data transfers complete", "test complete", "return status 0"} {
			if !strings.Contains(out, w) {
				t.Errorf("%s printed no %q:\n%s", who, w, out)
			}
		}
	}
	out, err := exec.Command(bin, "dump", "--verify", capture).CombinedOutput()
	if err != nil {
		t.Errorf("xdproce dump --verify %s: %v\n%s", capture, err, lastLines(string(out), 20))
	}
	sends := 0
	for l := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(l, "→ "+mckeyGroup+":4791 UD_SEND_ONLY_WITH_IMMEDIATE qpn 0xffffff") &&
			strings.Contains(l, "qkey 0x01234567") && strings.Contains(l, "payload "+size+" ") {
			sends++
		}
	}
	if sends < 10 {
		t.Errorf("the capture shows %d SENDs of %s B to %s (QPN 0xffffff, Q_Key 0x01234567), want 10 or more:\n%s",
			sends, size, mckeyGroup, lastLines(string(out), 30))
	}
	note = fmt.Sprintf("IGMP member, %d SENDs to QPN 0xffffff in the capture (verified)", sends)
}
