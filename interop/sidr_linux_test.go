package interop

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrivilegedInteropUdaddy: librdmacm's udaddy in the guest against `xdproce udaddy`, UD
// through the RDMA CM (SIDR_REQ/SIDR_REP on QP1, RDMA_PS_UDP port 7174), 10 datagrams of 100 B
// each way, xdproce as server and as client over AF_XDP. Both must print udaddy's lines and
// "return status 0".
func TestPrivilegedInteropUdaddy(t *testing.T) {
	suiteEnabled(t)
	var note string
	recordIf(t, true, "udaddy", "every run", "both", "xsk", &note)
	needCommand(t, xdproceBin(t), &note, "udaddy") // before booting a guest for nothing
	needGuest(t)
	const count = 10
	for _, srv := range []bool{true, false} {
		t.Run("xdproce-"+role(srv), func(t *testing.T) {
			g := needGuest(t) // again: reboots the guest if the path to it died
			note := ""
			record(t, "udaddy", fmt.Sprintf("SIDR + UD SEND 100 B x%d", count), role(srv), "xsk", &note)
			bin := xdproceBin(t)
			capture := filepath.Join(t.TempDir(), "run.pcapng")
			xd := []string{bin, "udaddy", "--dev", g.tap, "--link", "xsk", "--capture", capture, "-C", fmt.Sprint(count)}
			tool := fmt.Sprintf("exec stdbuf -oL udaddy -C %d", count)
			var toolOut, xdOut string
			var rc int
			var terr, xerr error
			if srv {
				x := g.hostStart(t, xd...)
				waitHost(t, x, "udaddy: starting server", 30*time.Second)
				toolOut, rc, terr = g.start(t, tool+" -s "+g.hostIP).wait(60 * time.Second)
				xdOut, xerr = x.wait(10 * time.Second)
			} else {
				j := g.start(t, tool)
				g.guestCMListening(t, j, 7174, 30*time.Second) // udaddy prints its first line before it listens
				xdOut, xerr = g.hostStart(t, append(xd, "-s", g.guestIP)...).wait(60 * time.Second)
				toolOut, rc, terr = j.wait(10 * time.Second)
			}
			if terr != nil || rc != 0 || xerr != nil {
				note = fmt.Sprintf("udaddy rc %d %v; xdproce %v", rc, terr, xerr)
				t.Fatalf("udaddy: rc %d %v\n%s\nxdproce: %v\n%s", rc, terr, toolOut, xerr, xdOut)
			}
			for who, out := range map[string]string{"udaddy": toolOut, "xdproce udaddy": xdOut} {
				for _, w := range []string{"data transfers complete", "test complete", "return status 0"} {
					if !strings.Contains(out, w) {
						t.Errorf("%s printed no %q:\n%s", who, w, out)
					}
				}
			}
			// The capture: both SIDR messages, dump --verify clean.
			out, err := exec.Command(bin, "dump", "--verify", capture).CombinedOutput()
			if err != nil {
				t.Errorf("xdproce dump --verify %s: %v\n%s", capture, err, lastLines(string(out), 20))
			}
			for _, w := range []string{"SIDR_REQ", "SIDR_REP", "status=0"} {
				if !strings.Contains(string(out), w) {
					t.Errorf("the capture shows no %s:\n%s", w, lastLines(string(out), 40))
				}
			}
			note = fmt.Sprintf("SIDR_REQ/SIDR_REP, %d datagrams each way, capture verified (%d lines)", count, strings.Count(string(out), "\n"))
		})
	}
}
