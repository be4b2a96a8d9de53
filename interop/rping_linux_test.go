package interop

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The rping rows: librdmacm's rping in the guest against `xdproce rping`, the connection set up
// by the RDMA CM on both sides (REQ, REP, RTU and DREQ, DREP as MADs on QP1), then rping's loop
// (buffer-info SEND, READ, go-ahead SEND, buffer-info SEND, WRITE, go-ahead SEND) -C times.

const rpingPort = 7174 // rping's default rdma_cm port

// rpingLines are the lines rping -v prints to standard output for count pings of size bytes:
// "ping data: " on the client, "server ping data: " on the server, then the ping's buffer up
// to its NUL: "rdma-ping-N: " and letters counting up from 'A'+N (wrapping after 'z' to 'A')
// to size-1 characters in all.
func rpingLines(server bool, count, size int) []string {
	prefix := "ping data: "
	if server {
		prefix = "server " + prefix
	}
	const letters = 'z' - 'A' + 1
	lines := make([]string, count)
	for n := range count {
		var b strings.Builder
		fmt.Fprintf(&b, "rdma-ping-%d: ", n)
		c := n % letters
		for b.Len() < size-1 {
			b.WriteByte(byte('A' + c))
			c = (c + 1) % letters
		}
		lines[n] = prefix + b.String()
	}
	return lines
}

// rpingRun is one rping row: pings, size, role and address family.
type rpingRun struct {
	count, size int
	xdServer    bool
	ipv6        bool
	// late: xdproce's server starts only after the guest's first REQ was dropped at the tap;
	// Linux resends the REQ 4.3 s later.
	late bool
	// lose: the first CM message of one kind is dropped at the tap (over link/udp).
	lose *madLoss
}

// madLoss is a CM message dropped once at the tap's host end, and what the guest's CM counters
// must show of the recovery.
type madLoss struct {
	ingress bool // from the guest (else to it)
	attr    uint16
	name    string
	check   func(cm cmCounts) string // "" or what is wrong
}

func (r rpingRun) link() string {
	if r.lose != nil {
		return "udp" // tc sees no frame AF_XDP takes
	}
	return "xsk"
}

func (r rpingRun) name() string {
	fam := "ipv4"
	if r.ipv6 {
		fam = "ipv6"
	}
	n := fmt.Sprintf("%s/%dB/xdproce-%s", fam, r.size, role(r.xdServer))
	if r.late {
		n += "-late"
	}
	if r.lose != nil {
		n += "-lose-" + r.lose.name
	}
	return n
}

func (r rpingRun) op() string {
	op := fmt.Sprintf("-C %d -S %d -v -V", r.count, r.size)
	if r.ipv6 {
		op += " IPv6"
	}
	if r.late {
		op += ", REQ resent"
	}
	if r.lose != nil {
		dir := "to"
		if r.lose.ingress {
			dir = "from"
		}
		op = fmt.Sprintf("-C %d, 1st %s %s guest lost", r.count, r.lose.name, dir)
	}
	return op
}

// TestPrivilegedInteropRping: rping -C 100 -v -V with -S 64 and -S 4096 against `xdproce rping`
// with the same flags, xdproce as server and as client, over AF_XDP; and -S 64 over IPv6 (the
// tap's 2001:db8:: addresses, rxe0's IPv6 GID); and -C 10 with xdproce's server started only
// after the guest's first REQ was lost, so the connection is made by Linux's resent REQ; and
// four -C 10 rows over link/udp with one CM message lost at the tap (cmLosses). Each side's
// standard output must be exactly rping's lines for its role, both must exit 0, the guest's
// ib_cm counters must show the exchange (and the recovery), and xdproce's capture (MADs on QP1
// and the RC traffic) must pass `xdproce dump --verify`.
func TestPrivilegedInteropRping(t *testing.T) {
	suiteEnabled(t)
	var note string
	recordIf(t, true, "rping", "every run", "both", "both", &note)
	needCommand(t, xdproceBin(t), &note, "rping")
	needGuest(t) // boots the guest once, before the runs
	var runs []rpingRun
	for _, size := range []int{64, 4096} {
		for _, srv := range []bool{true, false} {
			runs = append(runs, rpingRun{count: 100, size: size, xdServer: srv})
		}
	}
	for _, srv := range []bool{true, false} {
		runs = append(runs, rpingRun{count: 100, size: 64, xdServer: srv, ipv6: true})
	}
	runs = append(runs, rpingRun{count: 10, size: 64, xdServer: true, late: true})
	for _, l := range cmLosses {
		runs = append(runs, rpingRun{count: 10, size: 64, xdServer: l.xdServer, lose: &l.loss})
	}
	for _, r := range runs {
		t.Run(r.name(), func(t *testing.T) {
			g := needGuest(t) // again: reboots the guest if the path to it died
			note := ""
			record(t, "rping", r.op(), role(r.xdServer), r.link(), &note)
			r.run(t, g, &note)
		})
	}
}

// run runs the row and checks it.
func (r rpingRun) run(t *testing.T, g *guest, note *string) {
	bin := xdproceBin(t)
	var drop *madDropper
	if r.lose != nil {
		drop = dropFirstMAD(t, g, r.lose.ingress, r.lose.attr, 1)
	}
	res, err := r.attempt(t, g, bin)
	if err != nil {
		*note += err.Error()
		t.Fatalf("%v\nrping in the guest: stdout:\n%s\nstderr:\n%s\nxdproce rping:\n%s", err, lastLines(res.toolOut, 10), res.toolErr, lastLines(res.xdOut, 30))
	}
	checkLines := func(who, out string, server bool) {
		want := rpingLines(server, r.count, r.size)
		got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(got) != len(want) {
			t.Errorf("%s printed %d lines, want rping's %d:\n%s", who, len(got), len(want), lastLines(out, 5))
			return
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s line %d:\n got %q\nwant %q", who, i+1, got[i], want[i])
				return
			}
		}
	}
	checkLines("rping in the guest", res.toolOut, !r.xdServer)
	checkLines("xdproce rping", res.xdStdout, r.xdServer)
	// xdproce's client reports the end of the connection as rping does, once its DREQ was
	// answered (rping's own line comes from its CM thread, which it does not wait for: the
	// guest's rping may exit before printing it).
	if !r.xdServer && !strings.Contains(res.xdOut, "client DISCONNECT EVENT...") {
		t.Errorf("xdproce's client did not report the disconnect (\"client DISCONNECT EVENT...\"):\n%s", lastLines(res.xdOut, 5))
	}
	// The guest's CM saw one whole connection: no REJ either way, and (for the late server) at
	// least one REQ resent. Retries otherwise are timing (4.3 s) and only reported.
	cm := res.cm
	if cm["tx.rej"]+cm["rx.rej"] != 0 {
		t.Errorf("the guest's CM sent %d and received %d REJs: %v", cm["tx.rej"], cm["rx.rej"], cm)
	}
	if r.xdServer {
		if cm["tx.req"] < 1 || cm["rx.rep"] < 1 || cm["tx.rtu"] < 1 || cm["tx.dreq"] < 1 || cm["rx.drep"] < 1 {
			t.Errorf("the guest's CM, active side, sent/received: %v (want REQ, REP, RTU, DREQ, DREP)", cm)
		}
		if r.late && cm["retry.req"] < 1 {
			t.Errorf("the guest's CM resent no REQ although the first was lost: %v", cm)
		}
	} else if cm["rx.req"] < 1 || cm["tx.rep"] < 1 || cm["rx.rtu"] < 1 || cm["rx.dreq"] < 1 || cm["tx.drep"] < 1 {
		t.Errorf("the guest's CM, passive side, sent/received: %v (want REQ, REP, RTU, DREQ, DREP)", cm)
	}
	if drop != nil {
		if n := drop.dropped(t); n != 1 {
			t.Errorf("the tap dropped %d %s MADs, want 1", n, r.lose.name)
		}
		if msg := r.lose.check(cm); msg != "" {
			t.Errorf("after the lost %s, the guest's CM counters: %v: %s", r.lose.name, cm, msg)
		}
	}
	out, derr := exec.Command(bin, "dump", "--verify", res.capture).CombinedOutput()
	if derr != nil {
		t.Errorf("xdproce dump --verify %s: %v\n%s", res.capture, derr, lastLines(string(out), 20))
		*note += "capture FAILED dump --verify"
		return
	}
	if r.late && !regexp.MustCompile(`(?m)^1 .* in .*\[CM REQ `).Match(out) {
		t.Errorf("the capture of the late server does not start with the guest's REQ:\n%s", lastLines(string(out), 200))
	}
	*note += fmt.Sprintf("%d lines each side as rping's, capture verified (%d lines); guest CM %s", r.count, strings.Count(string(out), "\n"), cm)
}

// rpingResult is what one attempt left: the guest's stdout and stderr apart, xdproce's
// combined output and its stdout, the capture's path, and the guest's CM counters' change.
type rpingResult struct {
	toolOut, toolErr, xdOut, xdStdout, capture string
	cm                                         cmCounts
}

// attempt runs rping in the guest and xdproce rping on the host once; err says what failed (an
// exit status, a timeout).
func (r rpingRun) attempt(t *testing.T, g *guest, bin string) (res rpingResult, err error) {
	hostIP, guestIP := g.hostIP, g.guestIP
	if r.ipv6 {
		if g.gid6Index < 0 {
			t.Fatalf("the guest has no IPv6 GID (guest.sh up --guest-ip6; see %s/env)", g.state)
		}
		hostIP, guestIP = g.hostIP6, g.guestIP6
	}
	flags := fmt.Sprintf("-C %d -S %d -v -V", r.count, r.size)
	res.capture = filepath.Join(t.TempDir(), "rping.pcapng")
	xd := append([]string{bin, "rping", "--dev", g.tap, "--link", r.link(), "--capture", res.capture}, strings.Fields(flags)...)
	// rping's stderr goes to a file and follows its stdout, marked, so the two can be told
	// apart; timeout bounds a server whose client never comes.
	guestCmd := func(args string) string {
		return fmt.Sprintf("timeout 120 stdbuf -oL rping %s %s 2>/tmp/rping.$$.err; rc=$?; sed 's/^/stderr: /' /tmp/rping.$$.err; exit $rc", args, flags)
	}
	cm0 := g.cmCounters(t)
	var j *job
	var x *hostProc
	switch {
	case r.late:
		// The tap drops the guest's first REQ (nobody would take it yet, in any case): once it
		// has, xdproce's server starts, and its XDP program takes the frames from then on.
		d := dropFirstMAD(t, g, true, attrREQ, 1)
		j = g.start(t, guestCmd("-c -a "+hostIP))
		end := time.Now().Add(60 * time.Second)
		for d.dropped(t) == 0 {
			if j.finished() || time.Now().After(end) {
				return res, errors.New("no REQ from the guest reached the tap in 60 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		x = g.hostStart(t, append(xd, "-s", "-a", hostIP, "-d")...)
	case r.xdServer:
		// Linux resends an unanswered REQ only after 4.3 s: listen before the guest dials.
		x = g.hostStart(t, append(xd, "-s", "-a", hostIP, "-d")...)
		if err := waitHost(x, 30*time.Second, "rping server listening"); err != nil {
			res.xdOut, res.xdStdout = x.output(), x.stdoutText()
			return res, err
		}
		j = g.start(t, guestCmd("-c -a "+hostIP))
	default:
		j = g.start(t, guestCmd("-s -a "+guestIP))
		g.cmListening(t, j, rpingPort, 60*time.Second)
		x = g.hostStart(t, append(xd, "-c", "-a", guestIP)...)
	}
	// Wait for the client first: a server whose client failed waits on (the guest's for up to
	// its timeout of 120 s).
	var out string
	var rc int
	var jerr, xerr error
	if r.xdServer {
		out, rc, jerr = j.wait(150 * time.Second)
		_, xerr = x.wait(30 * time.Second)
	} else {
		if _, xerr = x.wait(150 * time.Second); xerr != nil {
			j.kill()
		}
		out, rc, jerr = j.wait(30 * time.Second)
	}
	for _, l := range strings.SplitAfter(out, "\n") {
		if s, ok := strings.CutPrefix(l, "stderr: "); ok {
			res.toolErr += s
		} else {
			res.toolOut += l
		}
	}
	res.xdOut, res.xdStdout = x.output(), x.stdoutText()
	switch {
	case jerr != nil:
		err = fmt.Errorf("rping in the guest: %v", jerr)
	case rc != 0:
		err = fmt.Errorf("rping in the guest exited %d", rc)
	case xerr != nil:
		err = fmt.Errorf("xdproce rping: %v", xerr)
	}
	if err == nil {
		res.cm = g.cmCounters(t).minus(cm0)
	}
	return res, err
}

// cmCounts are the guest's ib_cm counters of rxe0 port 1 (sysfs cm_tx_msgs, cm_tx_retries,
// cm_rx_msgs, cm_rx_duplicates), keyed "tx.req", "retry.req", "rx.rep", "dup.req", ...
type cmCounts map[string]int

var cmCounterDirs = map[string]string{"cm_tx_msgs": "tx", "cm_tx_retries": "retry", "cm_rx_msgs": "rx", "cm_rx_duplicates": "dup"}

// cmCounters reads the guest's CM counters.
func (g *guest) cmCounters(t *testing.T) cmCounts {
	t.Helper()
	out := g.run(t, 30*time.Second, "cd /sys/class/infiniband/rxe0/ports/1 && grep -H . cm_tx_msgs/* cm_tx_retries/* cm_rx_msgs/* cm_rx_duplicates/*")
	c := cmCounts{}
	for _, l := range strings.Fields(out) {
		path, v, ok := strings.Cut(l, ":")
		dir, name, ok2 := strings.Cut(path, "/")
		n, err := strconv.Atoi(v)
		if !ok || !ok2 || err != nil || cmCounterDirs[dir] == "" {
			t.Fatalf("guest CM counters: cannot read %q in:\n%s", l, out)
		}
		c[cmCounterDirs[dir]+"."+name] = n
	}
	if len(c) == 0 {
		t.Fatalf("guest CM counters: none in:\n%s", out)
	}
	return c
}

// minus is c's change since before.
func (c cmCounts) minus(before cmCounts) cmCounts {
	d := cmCounts{}
	for k, v := range c {
		d[k] = v - before[k]
	}
	return d
}

// String lists the counters that are not zero, in order: "sent REQ 1 RTU 1 DREQ 1, received
// REP 1 DREP 1, resent REQ 1".
func (c cmCounts) String() string {
	var parts []string
	for _, k := range []struct{ key, label string }{{"tx", "sent"}, {"rx", "received"}, {"retry", "resent"}, {"dup", "duplicates"}} {
		var msgs []string
		for _, m := range []string{"req", "mra", "rej", "rep", "rtu", "dreq", "drep", "lap", "apr", "sidr_req", "sidr_rep"} {
			if n := c[k.key+"."+m]; n != 0 {
				msgs = append(msgs, fmt.Sprintf("%s %d", strings.ToUpper(m), n))
			}
		}
		if len(msgs) > 0 {
			parts = append(parts, k.label+" "+strings.Join(msgs, " "))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// waitHost waits until p's output holds want, or p exits, or timeout passes.
func waitHost(p *hostProc, timeout time.Duration, want string) error {
	end := time.Now().Add(timeout)
	for !strings.Contains(p.output(), want) {
		if p.finished() {
			return fmt.Errorf("exited (%v) before printing %q", p.err, want)
		}
		if time.Now().After(end) {
			return fmt.Errorf("printed no %q in %v", want, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// cmListening waits until an RDMA CM identifier listens on port in the guest (`rdma resource
// show cm_id`), or the server job ends first (its output then says why).
func (g *guest) cmListening(t *testing.T, server *job, port int, timeout time.Duration) {
	t.Helper()
	probe := g.start(t, fmt.Sprintf("for i in $(seq %d); do rdma resource show cm_id | grep -q 'state LISTEN.*:%d ' && exit 0; read -r -t 0.2 < /run/nap; done; rdma resource show cm_id; exit 1", int(timeout/(200*time.Millisecond)), port))
	g.awaitProbe(t, server, probe, fmt.Sprintf("no RDMA CM listener on port %d after %v", port, timeout))
}

// cmLosses are the rows with one CM message lost: xdproce's retries or the kernel's must
// recover, as the guest's counters show where only one side can.
var cmLosses = []struct {
	xdServer bool
	loss     madLoss
}{
	// Linux resends its REQ, or xdproce its REP: either may come first.
	{true, madLoss{ingress: false, attr: attrREP, name: "REP", check: func(cmCounts) string { return "" }}},
	// Only xdproce can recover: it resends the REP, Linux answers the duplicate with its RTU.
	{true, madLoss{ingress: true, attr: attrRTU, name: "RTU", check: func(c cmCounts) string {
		if c["dup.rep"] < 1 || c["tx.rtu"] < 2 {
			return "want a duplicate REP received and the RTU sent again"
		}
		return ""
	}}},
	// Linux resends its REP, or xdproce its REQ (a duplicate to Linux).
	{false, madLoss{ingress: true, attr: attrREP, name: "REP", check: func(c cmCounts) string {
		if c["retry.rep"]+c["dup.req"] < 1 {
			return "want the REP resent or a duplicate REQ received"
		}
		return ""
	}}},
	// Only xdproce can recover: it resends the DREQ, Linux answers the duplicate with a DREP.
	{false, madLoss{ingress: true, attr: attrDREP, name: "DREP", check: func(c cmCounts) string {
		if c["dup.dreq"] < 1 || c["tx.drep"] < 2 {
			return "want a duplicate DREQ received and the DREP sent again"
		}
		return ""
	}}},
}

// TestRpingLines checks rpingLines against rping's own output in the rxe capture's notes
// (rping -s/-c -C 2 -S 64 -v between two rxe guests).
func TestRpingLines(t *testing.T) {
	b, err := os.ReadFile("../testdata/rxe/rdmacm_rping.txt")
	if err != nil {
		t.Fatal(err)
	}
	var server, client []string
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "server ping data: "):
			server = append(server, l)
		case strings.HasPrefix(l, "ping data: "):
			client = append(client, l)
		}
	}
	if want := rpingLines(true, 2, 64); !slices.Equal(server, want) {
		t.Errorf("server lines:\n got %q\nwant %q (rping's)", want, server)
	}
	if want := rpingLines(false, 2, 64); !slices.Equal(client, want) {
		t.Errorf("client lines:\n got %q\nwant %q (rping's)", want, client)
	}
	// Past 'z' the letters wrap to 'A'; the 59th ping starts at 'A' again.
	l := rpingLines(false, 59, 4096)
	if got := l[58][:len("ping data: rdma-ping-58: ")+3]; got != "ping data: rdma-ping-58: ABC" {
		t.Errorf("ping 58 starts %q", got)
	}
	if n := len(l[0]) - len("ping data: "); n != 4095 {
		t.Errorf("a -S 4096 line holds %d characters, want 4095 (the buffer up to its NUL)", n)
	}
}
