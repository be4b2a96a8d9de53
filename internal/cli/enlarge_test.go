package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// dumpRecord is the part of a 'dump --json' record these tests read.
type dumpRecord struct {
	Index int    `json:"index"`
	Dir   string `json:"dir"`
	BTH   struct {
		Opcode  string `json:"opcode"`
		DestQPN uint32 `json:"dest_qpn"`
		PSN     uint32 `json:"psn"`
	} `json:"bth"`
	Payload     string `json:"payload"`
	PayloadKind string `json:"payload_kind"`
	PayloadLen  int    `json:"payload_len"`
}

// selfStart is this process's start time from /proc/self/stat (field 22).
func selfStart(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return f[22-3]
}

// TestPrivilegedSendEnlarge: 'send --enlarge' moves a 4 MiB file through an
// enlargement channel between two namespaces over AF_XDP, byte-exact; the
// sending direction climbs every step of the ladder, and the client's
// capture shows it: ENLARGE_REQ phase 1, its ENLARGE_ACK, data, ENLARGE_REQ
// phase 2, its ACK, data, with no data frame on the channel before the first
// ACK nor between a request and its ACK. The capture passes dump --verify.
// Serve's start-up removes a temporary file of a dead receiver and keeps one
// of a live process.
func TestPrivilegedSendEnlarge(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	dir := t.TempDir()
	dead := ".victim.xdproce-4194999-1-1.part" // above the largest pid_max
	live := ".busy.xdproce-" + strconv.Itoa(os.Getpid()) + "-" + selfStart(t) + "-2.part"
	for _, n := range []string{dead, live} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := startServerIn(t, topo, dir)
	waitOutput(t, &s.errb, "serving on")
	if _, err := os.Stat(filepath.Join(dir, dead)); !os.IsNotExist(err) {
		t.Errorf("stale %s kept: %v", dead, err)
	}
	if _, err := os.Stat(filepath.Join(dir, live)); err != nil {
		t.Errorf("%s of a live process removed: %v", live, err)
	}
	if !strings.Contains(s.errb.String(), "removed "+filepath.Join(dir, dead)) || strings.Contains(s.errb.String(), live) {
		t.Errorf("serve start-up output: %q", s.errb.String())
	}
	os.Remove(filepath.Join(dir, live))

	work := t.TempDir()
	src := filepath.Join(work, "climb")
	const size = 4<<20 + 123
	data := writeFile(t, src, size, 11)
	want := sha256.Sum256(data)
	capPath := filepath.Join(work, "enlarge.pcapng")
	r := runCmd(t, clientCmd(topo, "send", "--enlarge", "--json", "--capture", capPath, topo.A.IPv4.String(), src))
	if r.code != 0 {
		t.Fatalf("send --enlarge: exit %d: %s\nserver: %s", r.code, r.stderr, s.errb.String())
	}
	checkClimbed(t, r.stdout, size, want, "AF_XDP")
	if got, err := os.ReadFile(filepath.Join(dir, "climb")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, size)
	}
	noPartial(t, dir, "")

	t.Logf("send: %s", r.stdout)
	v := runBinary(t, "dump", "--verify", capPath)
	if v.code != 0 {
		t.Fatalf("dump --verify: exit %d: %s", v.code, v.stderr)
	}
	if lines := strings.SplitN(v.stdout, "\n", 13); len(lines) == 13 {
		t.Logf("capture begins:\n%s", strings.Join(lines[:12], "\n"))
	}
	for _, w := range []string{"[ENLARGE_REQ phase=1 size=7372]", "[ENLARGE_ACK addr=0x", "len=32768 phase=1]",
		"[ENLARGE_REQ phase=2 size=1048576]", "len=524288 phase=2]", "[ENLARGE_CREDIT phase=2"} {
		if !strings.Contains(v.stdout, w) {
			t.Errorf("dump lacks %q", w)
		}
	}
	if got, want := channelEvents(t, capPath), "REQ1 ACK1 DATA REQ2 ACK2 DATA"; got != want {
		t.Errorf("channel events in the capture: %s, want %s", got, want)
	}
	s.stop(t)
	for _, w := range []string{"received climb: 4194427 bytes", "enlarge: phase 2 (131072 B slots) after 2 promotions"} {
		if !strings.Contains(s.out.String(), w) {
			t.Errorf("server output lacks %q:\n%s", w, s.out.String())
		}
	}
}

// checkClimbed checks the --json result of a send or get --enlarge of size
// bytes with SHA-256 want over the link named link…: the channel's data
// direction reached phase 2 (128 KiB) after 2 promotions, and this side sent
// 2 control messages (requests when sending, acks when getting).
func checkClimbed(t *testing.T, stdout string, size int, want [32]byte, link string) {
	t.Helper()
	var res struct {
		Size    int64  `json:"size"`
		SHA256  string `json:"sha256"`
		Op      string `json:"op"`
		Link    string `json:"link"`
		Enlarge *struct {
			Phase      int `json:"phase"`
			SlotSize   int `json:"slot_size"`
			Promotions int `json:"promotions"`
			Control    int `json:"control_sent"`
		} `json:"enlarge"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
	if res.Size != int64(size) || res.SHA256 != hexString(want[:]) || !strings.HasPrefix(res.Op, "enlarge") ||
		!strings.HasPrefix(res.Link, link) || res.Enlarge == nil {
		t.Fatalf("result %+v", res)
	}
	if e := res.Enlarge; e.Phase != 2 || e.SlotSize != 128<<10 || e.Promotions != 2 || e.Control != 2 {
		t.Errorf("channel %+v, want phase 2 (128 KiB) after 2 promotions, 2 control messages", *e)
	}
}

// TestPrivilegedSendEnlargeFailures: the error behaviour of send --enlarge is
// that of send: a client killed mid-transfer leaves the server without a
// temporary file and still serving; a server killed mid-transfer makes the
// client fail with one error line, and nothing appears under the final name.
func TestPrivilegedSendEnlargeFailures(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	big := filepath.Join(t.TempDir(), "big")
	writeFile(t, big, 64<<20, 8)
	s := startServer(t, topo)
	host := topo.A.IPv4.String()

	c := clientCmd(topo, "send", "--enlarge", host, big, "--name", "victim")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitPart(t, s.dir)
	c.Process.Kill()
	c.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && hasPart(s.dir) {
		time.Sleep(10 * time.Millisecond)
	}
	noPartial(t, s.dir, "victim")
	waitOutput(t, &s.out, "received victim failed")

	small := filepath.Join(t.TempDir(), "small")
	data := writeFile(t, small, 100<<10, 9)
	if r := runCmd(t, clientCmd(topo, "send", "--enlarge", host, small)); r.code != 0 {
		t.Fatalf("send --enlarge after a killed client: exit %d: %s", r.code, r.stderr)
	}
	if got, err := os.ReadFile(filepath.Join(s.dir, "small")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v)", len(got), err)
	}

	c = clientCmd(topo, "send", "--enlarge", host, big, "--name", "big2")
	var cerr syncBuffer
	c.Stderr = &cerr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitPart(t, s.dir)
	s.kill()
	err := c.Wait()
	t.Logf("client: %s", cerr.String())
	oneErrorLine(t, "server killed during send --enlarge", result{stderr: cerr.String(), code: exitCode(err)}, 1, "send "+big)
	if _, err := os.Stat(filepath.Join(s.dir, "big2")); !os.IsNotExist(err) {
		t.Errorf("big2 exists after the server died: %v", err)
	}
}

// field returns the value of key=value in a described payload.
func field(desc, key string) string {
	for _, f := range strings.Fields(strings.Trim(desc, "[]")) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return fmt.Sprintf("(no %s)", key)
}

// channelEvents reads the capture of a send --enlarge with 'dump --json' and
// returns its channel events in order: REQn and ACKn for the control
// messages (checking their directions), DATA for a run of this side's
// writes of content.
func channelEvents(t *testing.T, capPath string) string { return channelEventsOf(t, capPath, true) }

// channelEventsOf is channelEvents for the capture of the data's sending side
// (sender) or of its receiving side (get --enlarge), where requests and data
// come in and acks go out.
func channelEventsOf(t *testing.T, capPath string, sender bool) string {
	t.Helper()
	js := runBinary(t, "dump", "--json", capPath)
	if js.code != 0 {
		t.Fatalf("dump --json: exit %d: %s", js.code, js.stderr)
	}
	out, in := "out", "in"
	if !sender {
		out, in = in, out
	}
	var events []string
	type frameID struct {
		dir      string
		qpn, psn uint32
	}
	seen := map[frameID]bool{}
	for _, line := range strings.Split(strings.TrimSpace(js.stdout), "\n") {
		var rec dumpRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		// A frame RC retransmitted (same direction, queue pair and PSN:
		// its ACK was late on a loaded machine) is one event, not two.
		if id := (frameID{rec.Dir, rec.BTH.DestQPN, rec.BTH.PSN}); rec.BTH.Opcode != "" {
			if seen[id] {
				continue
			}
			seen[id] = true
		}
		switch {
		case rec.PayloadKind == "enlarge" && strings.HasPrefix(rec.Payload, "ENLARGE_REQ"):
			if rec.Dir != out {
				t.Errorf("frame %d: ENLARGE_REQ %s", rec.Index, rec.Dir)
			}
			events = append(events, "REQ"+field(rec.Payload, "phase"))
		case rec.PayloadKind == "enlarge" && strings.HasPrefix(rec.Payload, "ENLARGE_ACK"):
			if rec.Dir != in {
				t.Errorf("frame %d: ENLARGE_ACK %s", rec.Index, rec.Dir)
			}
			events = append(events, "ACK"+field(rec.Payload, "phase"))
		case rec.Dir == out && strings.Contains(rec.BTH.Opcode, "RDMA_WRITE") && rec.PayloadKind == "" && rec.PayloadLen > 0:
			if n := len(events); n == 0 || events[n-1] != "DATA" {
				events = append(events, "DATA")
			}
		}
	}
	return strings.Join(events, " ")
}

// TestPrivilegedSendEnlargeUDP: serve and send --enlarge run as nobody over
// --link udp (kernel sockets, no privileges) between two namespaces; the file
// lands byte-exact and the capture shows the same promotions.
func TestPrivilegedSendEnlargeUDP(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	work, err := os.MkdirTemp("", "xdproce-enlarge-udp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	bin := filepath.Join(work, "xdproce")
	if err := os.WriteFile(bin, mustRead(t, binary), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(work, "in")
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777)
	os.Chmod(work, 0o777)
	asNobody := func(ns *netlab.NS, args ...string) *exec.Cmd {
		return ns.Command(context.Background(), "setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, args...)...)
	}
	s := &server{dir: dir, done: make(chan error, 1)}
	s.cmd = asNobody(topo.A.NS, "serve", "--dev", topo.A.Name, "--dir", dir, "--link", "udp", "--insecure")
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.errb
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })

	src := filepath.Join(work, "climb")
	data := writeFile(t, src, 1<<20, 12)
	os.Chmod(src, 0o644)
	capPath := filepath.Join(work, "udp.pcapng")
	r := runCmd(t, asNobody(topo.B.NS, "send", "--dev", topo.B.Name, "--link", "udp", "--enlarge", "--capture", capPath,
		topo.A.IPv4.String(), src))
	if r.code != 0 {
		t.Fatalf("send --enlarge --link udp: exit %d: %s\nserver: %s", r.code, r.stderr, s.errb.String())
	}
	if !strings.Contains(r.stdout, "over UDP") || !strings.Contains(r.stdout, "enlarge: phase 2") {
		t.Errorf("send output: %q", r.stdout)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "climb")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v)", len(got), err)
	}
	if st, err := os.Stat(filepath.Join(dir, "climb")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("stored file not written by nobody: %v", err)
	}
	if v := runBinary(t, "dump", "--verify", capPath); v.code != 0 {
		t.Errorf("dump --verify: exit %d: %s", v.code, v.stderr)
	}
	if got, want := channelEvents(t, capPath), "REQ1 ACK1 DATA REQ2 ACK2 DATA"; got != want {
		t.Errorf("channel events in the capture: %s, want %s", got, want)
	}
}
