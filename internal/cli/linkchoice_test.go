package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// TestPrivilegedLinkChoiceLogged: every command that opens a device says at
// info level which link --link auto chose and why, before it goes on (here
// to a peer that is not there): on veth, UDP with GSO/GRO, as info says.
func TestPrivilegedLinkChoiceLogged(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	writeFile(t, f, 10, 1)
	b, peer := topo.B.Name, topo.A.IPv4.String()
	for _, args := range [][]string{
		{"send", "--dev", b, "--connect-timeout", "100ms", peer, f},
		{"get", "--dev", b, "--connect-timeout", "100ms", peer, "f", filepath.Join(dir, "g")},
		{"bench", "write", "--dev", b, "--connect-timeout", "100ms", peer},
		{"pingpong", "--dev", b, "--connect-timeout", "100ms", peer},
		serveArgs(b, dir, "--listen", "127.0.0.1:0"),
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second) // serve runs until killed
		r := runCmd(t, topo.B.NS.Command(ctx, binary, append(args, "--log-level", "info")...))
		cancel()
		var line string
		for l := range strings.SplitSeq(r.stderr, "\n") {
			if strings.Contains(l, `msg="link chosen"`) {
				line = l
			}
		}
		if !strings.Contains(line, "level=INFO") || !strings.Contains(line, "dev="+b) || !strings.Contains(line, "link=UDP") ||
			!strings.Contains(line, "asked=auto") || !strings.Contains(line, `reason="virtual device veth: UDP with GSO/GRO`) {
			t.Errorf("%s: no info line with the link chosen and why in %q", args[0], r.stderr)
		}
	}
	r := runCmd(t, topo.B.NS.Command(t.Context(), binary, "info", "--json", b))
	var rep struct {
		Interfaces []struct {
			LinkAuto struct{ Link, Reason string } `json:"link_auto"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Interfaces) != 1 ||
		rep.Interfaces[0].LinkAuto.Link != "udp" || !strings.HasPrefix(rep.Interfaces[0].LinkAuto.Reason, "virtual device veth: UDP with GSO/GRO") {
		t.Errorf("info --json: %+v (%v) in %q", rep, err, r.stdout)
	}
	r = runCmd(t, topo.B.NS.Command(t.Context(), binary, "info", b))
	if !strings.Contains(r.stdout, "\n  --link auto: udp (virtual device veth: UDP with GSO/GRO") {
		t.Errorf("info does not say what --link auto picks: %q", r.stdout)
	}
}
