package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// heldWithin bounds how long a second process on a held interface may take
// to give up.
const heldWithin = 5 * time.Second

// runHeld runs the binary in the namespace and checks that it exits 1 within
// heldWithin with one line naming the holder: "held by PID <pid> (xdproce
// serve ...), which holds <holds>".
func runHeld(t *testing.T, ns *netlab.NS, pid int, holds string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*heldWithin)
	defer cancel()
	start := time.Now()
	r := runCmd(t, ns.Command(ctx, binary, args...))
	el := time.Since(start)
	what := strings.Join(args, " ")
	oneErrorLine(t, what, r, 1, "held by PID "+strconv.Itoa(pid)+" (xdproce serve --dev ")
	if !strings.Contains(r.stderr, ", which holds "+holds) {
		t.Errorf("%s: %q does not name what the holder holds (%q)", what, r.stderr, holds)
	}
	if el > heldWithin {
		t.Errorf("%s: gave up after %v, want within %v", what, el.Round(time.Millisecond), heldWithin)
	}
	t.Logf("%s: %v: %s", what, el.Round(time.Millisecond), strings.TrimSpace(r.stderr))
}

// infoHolder runs 'xdproce info --json IF' in the namespace and returns the
// interface's AF_XDP verdict.
func infoHolder(t *testing.T, ns *netlab.NS, ifname string) verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r := runCmd(t, ns.Command(ctx, binary, "info", "--json", ifname))
	var rep infoReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil || len(rep.Interfaces) != 1 {
		t.Fatalf("info %s: exit %d, %v: %s%s", ifname, r.code, err, r.stdout, r.stderr)
	}
	return rep.Interfaces[0].AFXDP
}

// TestPrivilegedSecondProcessHeld: while 'xdproce serve' holds an interface
// by AF_XDP, a second xdproce process there (serve and get with --link auto,
// send with --link udp and --link xsk) exits 1 within 5 s with one line
// naming the holder's PID, command and XDP program, instead of falling back
// to a link that cannot receive; info names the holder instead of saying no.
// While serve holds the RoCE UDP port, AF_XDP there is refused naming that.
// Once the holder is gone, info says yes.
func TestPrivilegedSecondProcessHeld(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	writeFile(t, f, 10, 1)
	host := topo.B.IPv4.String()
	a := topo.A.Name

	s := startServer(t, topo)
	waitOutput(t, &s.errb, "serving on")
	pid := s.cmd.Process.Pid // ip netns exec execs the binary: same process
	const xdp = "XDP program xdp_steer (id "
	for _, args := range [][]string{
		serveArgs(a, dir, "--listen", ":18599"),
		{"get", "--dev", a, host, "f", filepath.Join(dir, "g")},
		{"send", "--dev", a, "--link", "udp", host, f},
		{"send", "--dev", a, "--link", "xsk", host, f},
	} {
		runHeld(t, topo.A.NS, pid, xdp, args...)
	}
	v := infoHolder(t, topo.A.NS, a)
	if v.Available || v.Holder == nil || v.Holder.PID != pid || !strings.HasPrefix(v.Holder.Command, "xdproce serve") ||
		!strings.HasPrefix(v.Holder.Holds, xdp) || !strings.HasPrefix(v.Reason, "held by PID "+strconv.Itoa(pid)) {
		t.Errorf("info while held by serve (PID %d): %+v %+v", pid, v, v.Holder)
	}
	s.stop(t)

	u := startServerIn(t, topo, t.TempDir(), "--link", "udp")
	waitOutput(t, &u.errb, "serving on")
	runHeld(t, topo.A.NS, u.cmd.Process.Pid, "UDP port 4791 on ::", "send", "--dev", a, "--link", "xsk", host, f)
	if v := infoHolder(t, topo.A.NS, a); v.Available || v.Holder == nil || v.Holder.PID != u.cmd.Process.Pid {
		t.Errorf("info while serve holds UDP port 4791: %+v", v)
	}
	u.stop(t)

	if v := infoHolder(t, topo.A.NS, a); !v.Available || v.Holder != nil {
		t.Errorf("info once the holders are gone: %+v", v)
	}
}

// serveArgs is the command line of a file server on dev storing into dir,
// taking any client (--insecure).
func serveArgs(dev, dir string, extra ...string) []string {
	return append([]string{"serve", "--dev", dev, "--dir", dir, "--insecure"}, extra...)
}
