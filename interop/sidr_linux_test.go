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
// each way, xdproce as server and as client over AF_XDP.
func TestPrivilegedInteropUdaddy(t *testing.T) {
	cmToolRows(t, cmTool{name: "udaddy", op: "SIDR + UD SEND 100 B x10", port: 7174, args: "-C 10",
		ready: "udaddy: starting server", madWords: []string{"SIDR_REQ", "SIDR_REP", "status=0"}})
}

// TestPrivilegedInteropUcmatose: librdmacm's ucmatose in the guest against `xdproce
// ucmatose`, two RC connections through the RDMA CM (RDMA_PS_TCP port 7471), 10 SENDs of 100 B
// each way on each, the server's disconnect, xdproce as server and as client over AF_XDP.
func TestPrivilegedInteropUcmatose(t *testing.T) {
	cmToolRows(t, cmTool{name: "ucmatose", op: "CM x2 + SEND 100 B x10", port: 7471, args: "-c 2 -C 10",
		ready: "cmatose: starting server", madWords: []string{"CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"}})
}

// cmTool is a librdmacm example the guest and xdproce both run under the same name and flags.
type cmTool struct {
	name, op, args string
	port           int      // its rdma_cm port
	ready          string   // xdproce's server line once it listens
	madWords       []string // what xdproce's capture must show
}

// cmToolRows runs c both ways: both must print "data transfers complete", "test complete"
// and "return status 0"; xdproce's capture must pass dump --verify and show c.madWords.
func cmToolRows(t *testing.T, c cmTool) {
	suiteEnabled(t)
	var note string
	recordIf(t, true, c.name, "every run", "both", "xsk", &note)
	needCommand(t, xdproceBin(t), &note, c.name) // before booting a guest for nothing
	needGuest(t)
	for _, srv := range []bool{true, false} {
		t.Run("xdproce-"+role(srv), func(t *testing.T) {
			g := needGuest(t) // again: reboots the guest if the path to it died
			note := ""
			record(t, c.name, c.op, role(srv), "xsk", &note)
			bin := xdproceBin(t)
			capture := filepath.Join(t.TempDir(), "run.pcapng")
			xd := append([]string{bin, c.name, "--dev", g.tap, "--link", "xsk", "--capture", capture}, strings.Fields(c.args)...)
			tool := "exec stdbuf -oL " + c.name + " " + c.args
			var toolOut, xdOut string
			var rc int
			var terr, xerr error
			if srv {
				x := g.hostStart(t, xd...)
				if err := waitHost(x, 30*time.Second, c.ready); err != nil {
					t.Fatalf("xdproce %s server: %v:\n%s", c.name, err, x.output())
				}
				toolOut, rc, terr = g.start(t, tool+" -s "+g.hostIP).wait(60 * time.Second)
				xdOut, xerr = x.wait(10 * time.Second)
			} else {
				j := g.start(t, tool)
				g.cmListening(t, j, c.port, 30*time.Second) // the tools print their first line before they listen
				xdOut, xerr = g.hostStart(t, append(xd, "-s", g.guestIP)...).wait(60 * time.Second)
				toolOut, rc, terr = j.wait(10 * time.Second)
			}
			if terr != nil || rc != 0 || xerr != nil {
				note = fmt.Sprintf("%s rc %d %v; xdproce %v", c.name, rc, terr, xerr)
				t.Fatalf("%s: rc %d %v\n%s\nxdproce: %v\n%s", c.name, rc, terr, toolOut, xerr, xdOut)
			}
			for who, out := range map[string]string{c.name: toolOut, "xdproce " + c.name: xdOut} {
				for _, w := range []string{"data transfers complete", "test complete", "return status 0"} {
					if !strings.Contains(out, w) {
						t.Errorf("%s printed no %q:\n%s", who, w, out)
					}
				}
			}
			out, err := exec.Command(bin, "dump", "--verify", capture).CombinedOutput()
			if err != nil {
				t.Errorf("xdproce dump --verify %s: %v\n%s", capture, err, lastLines(string(out), 20))
			}
			for _, w := range c.madWords {
				if !strings.Contains(string(out), w) {
					t.Errorf("the capture shows no %s:\n%s", w, lastLines(string(out), 40))
				}
			}
			note = fmt.Sprintf("%s, capture verified (%d lines)", strings.Join(c.madWords, "/"), strings.Count(string(out), "\n"))
		})
	}
}
