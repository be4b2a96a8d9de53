package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// TestPrivilegedGetEnlarge: 'get --enlarge' brings a 4 MiB file from serve
// through an enlargement channel between two namespaces, over AF_XDP and over
// --link udp, byte-exact: the server's sending direction climbs every step
// of the ladder, and the client's capture shows it from the receiving side
// (ENLARGE_REQ phase 1 in, its ENLARGE_ACK out, data in, then phase 2), no
// data before the first ack nor between a request and its ack; the capture
// passes dump --verify, and serve reports the phase its direction reached.
func TestPrivilegedGetEnlarge(t *testing.T) {
	testenv.Privileged(t)
	for _, link := range []string{"xsk", "udp"} {
		t.Run(link, func(t *testing.T) {
			topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
			dir, back := t.TempDir(), t.TempDir()
			const size = 4<<20 + 321
			data := writeFile(t, filepath.Join(dir, "climb"), size, 21)
			want := sha256.Sum256(data)
			s := startIn(t, topo.A.NS, "serve", "--dev", topo.A.Name, "--dir", dir, "--link", link, "--insecure")
			waitOutput(t, &s.errb, "serving on")

			capPath := filepath.Join(back, "get.pcapng")
			r := runCmd(t, topo.B.NS.Command(context.Background(), binary, "get", "--dev", topo.B.Name, "--link", link,
				"--enlarge", "--json", "--capture", capPath, topo.A.IPv4.String(), "climb", back))
			if r.code != 0 {
				t.Fatalf("get --enlarge: exit %d: %s\nserver: %s", r.code, r.stderr, s.errb.String())
			}
			checkClimbed(t, r.stdout, size, want, map[string]string{"xsk": "AF_XDP", "udp": "UDP"}[link])
			if got, err := os.ReadFile(filepath.Join(back, "climb")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("got %d bytes (%v), want %d byte-exact", len(got), err, size)
			}
			noPartial(t, back, "")
			if v := runBinary(t, "dump", "--verify", capPath); v.code != 0 {
				t.Fatalf("dump --verify: exit %d: %s", v.code, v.stderr)
			}
			if got, want := channelEventsOf(t, capPath, false), "REQ1 ACK1 DATA REQ2 ACK2 DATA"; got != want {
				t.Errorf("channel events in the capture: %s, want %s", got, want)
			}
			s.stop(t)
			for _, w := range []string{"sent climb: 4194625 bytes", "enlarge: phase 2 (131072 B slots) after 2 promotions"} {
				if !strings.Contains(s.out.String(), w) {
					t.Errorf("server output lacks %q:\n%s", w, s.out.String())
				}
			}
		})
	}
}

// TestDemoEnlargeUnprivileged: 'demo --enlarge' as an unprivileged user
// (link/udp on loopback) with --capture "" lists its promotions, each request
// out and ack in with its phase, from a capture of its own that it removes.
func TestDemoEnlargeUnprivileged(t *testing.T) {
	cmdFor, dir := unprivileged(t)
	r := runCmd(t, cmdFor("demo", "--enlarge", "--size", "2MiB", "--capture", ""))
	if r.code != 0 {
		t.Fatalf("demo --enlarge: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	demoPromotions(t, r.stdout)
	if caps, _ := filepath.Glob(filepath.Join(dir, "xdproce-demo-*")); len(caps) != 0 {
		t.Errorf("left behind: %v", caps)
	}
}

// TestPrivilegedDemoEnlarge: 'demo --enlarge' in its lab over AF_XDP lists
// the promotions from the capture it names.
func TestPrivilegedDemoEnlarge(t *testing.T) {
	testenv.Privileged(t)
	capPath := filepath.Join(t.TempDir(), "demo.pcapng")
	r := runCmd(t, exec.Command(binary, "demo", "--enlarge", "--size", "4MiB", "--capture", capPath))
	if r.code != 0 {
		t.Fatalf("demo --enlarge: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	demoPromotions(t, r.stdout)
	for _, want := range []string{"link: AF_XDP", "through an enlargement channel", "capture: " + capPath, "lab removed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	if v := runBinary(t, "dump", "--verify", capPath); v.code != 0 {
		t.Errorf("dump --verify: exit %d: %s", v.code, v.stderr)
	}
}

// demoPromotions checks the promotion lines of a demo --enlarge: request
// phase 1 out, its ack in, request phase 2 out, its ack in, in that order,
// then the phase reached.
func demoPromotions(t *testing.T, out string) {
	t.Helper()
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "promotion: frame "); ok {
			f := strings.Fields(rest)
			if len(f) < 3 {
				t.Fatalf("promotion line %q", line)
			}
			got = append(got, f[1]+" "+f[2]+" "+field(rest, "phase"))
		}
	}
	want := []string{"out ENLARGE_REQ 1", "in ENLARGE_ACK 1", "out ENLARGE_REQ 2", "in ENLARGE_ACK 2"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("promotions %q, want %q; output:\n%s", got, want, out)
	}
	if !strings.Contains(out, "enlarge: phase 2 (131072 B slots) after 2 promotions") || !strings.Contains(out, "verified") {
		t.Errorf("demo output lacks the phase reached or the verification:\n%s", out)
	}
}
