package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/stat"
	"github.com/xdproce/xdproce/internal/testenv"
)

// rxeCounters are the names of rxe's hw_counters that stat must list.
var rxeCounters = []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
	"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err",
	"completer_retry_err", "send_err", "rdma_sends", "rdma_recvs"}

// TestPrivilegedStatMetrics: a serve over AF_XDP opens a 0600 stat socket
// named after its PID, namespace and interface; 'xdproce stat --json' lists
// rxe's counters, xdproce's and the XDP program's, and sent_pkts rises in
// the samples taken during a transfer, as rdma_sent_pkts_total does in
// scrapes of --metrics; the capture is readable while serve runs; the
// socket goes when serve exits.
func TestPrivilegedStatMetrics(t *testing.T) {
	testenv.Privileged(t)
	runDir := t.TempDir()
	t.Setenv(stat.EnvDir, runDir)
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	// The client sends over kernel UDP through a token bucket of 400 Mb/s,
	// so the transfer lasts long enough to be sampled; the server's frames
	// leave by AF_XDP.
	if out, err := topo.B.NS.Command(t.Context(), "tc", "qdisc", "add", "dev", topo.B.Name, "root", "tbf",
		"rate", "400mbit", "burst", "256k", "latency", "20ms").CombinedOutput(); err != nil {
		t.Fatalf("tc tbf: %v: %s", err, out)
	}
	capFile := filepath.Join(t.TempDir(), "serve.pcapng")
	s := startServer(t, topo, "--metrics", "127.0.0.1:0", "--capture", capFile)
	waitOutput(t, &s.errb, "metrics at http://")
	addr := regexp.MustCompile(`metrics at http://(\S+)/metrics`).FindStringSubmatch(s.errb.String())[1]
	pid := s.cmd.Process.Pid

	// The socket: PID.NETNS.IFNAME.sock, mode 0600, with A's namespace.
	var nsA uint64
	if err := topo.A.NS.Do(func() (err error) { nsA, err = stat.NetNS(); return err }); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(runDir, fmt.Sprintf("%d.%d.%s.sock", pid, nsA, topo.A.Name))
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatalf("stat socket: %v (dir holds %v)", err, lsDir(runDir))
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("stat socket mode %v, want a socket with 0600", fi.Mode())
	}

	statJSON := func(args ...string) *stat.Reply {
		t.Helper()
		r := runBinary(t, append([]string{"stat", "--json"}, args...)...)
		if r.code != 0 {
			t.Fatalf("stat %v: exit %d: %s", args, r.code, r.stderr)
		}
		var rep stat.Reply
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Snapshot == nil {
			t.Fatalf("stat %v output %q: %v", args, r.stdout, err)
		}
		return &rep
	}
	scrape := func() float64 {
		t.Helper()
		body, err := scrapeIn(topo.A.NS, addr)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`(?m)^rdma_sent_pkts_total\{device="` + topo.A.Name + `",port="1"\} (\S+)$`)
		m := re.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("scrape has no rdma_sent_pkts_total for %s:\n%s", topo.A.Name, body)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}

	before := statJSON(strconv.Itoa(pid))
	if before.PID != pid || before.Command != "serve" || before.Device != topo.A.Name || before.NetNS != nsA ||
		!strings.HasPrefix(before.Link, "AF_XDP") {
		t.Errorf("reply %+v: want PID %d, serve, %s, netns %d, AF_XDP", before, pid, topo.A.Name, nsA)
	}
	for _, name := range append(rxeCounters, "retransmits", "icrc_errors") {
		if _, ok := before.Counters.Get(name); !ok {
			t.Errorf("stat lacks %s: %v", name, before.Counters)
		}
	}
	// The steering program's verdicts, then the AF_XDP sockets' statistics.
	for _, name := range []string{"xdp_redirected", "xdp_passed", "xsk_rx_dropped", "xsk_rx_ring_full",
		"xsk_rx_fill_ring_empty", "xsk_tx_invalid_descs", "xsk_rx_too_long", "xsk_tx_retry_waits"} {
		if _, ok := before.XDP.Get(name); !ok {
			t.Errorf("stat lacks %s: %v (%s)", name, before.XDP, before.XDPError)
		}
	}
	if doc, err := os.ReadFile("../../docs/counters.md"); err != nil {
		t.Error(err)
	} else {
		for _, c := range before.XDP {
			if !strings.Contains(string(doc), "`"+c.Name+"`") {
				t.Errorf("docs/counters.md does not describe %s", c.Name)
			}
		}
	}
	scrape0 := scrape()
	if body, err := scrapeIn(topo.A.NS, addr); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(body, `rdma_xsk_rx_ring_full_total{device="`+topo.A.Name+`",port="1"} `) {
		t.Errorf("scrape has no rdma_xsk_rx_ring_full_total for %s", topo.A.Name)
	}

	src := filepath.Join(t.TempDir(), "big")
	writeFile(t, src, 32<<20, 7)
	send := clientCmd(topo, "send", "--link", "udp", topo.A.IPv4.String(), src)
	var sendOut, sendErr syncBuffer
	send.Stdout, send.Stderr = &sendOut, &sendErr
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	sendDone := make(chan error, 1)
	go func() { sendDone <- send.Wait() }()
	t.Cleanup(func() {
		send.Process.Kill()
		<-sendDone
	})
	running := func() bool {
		select {
		case err := <-sendDone:
			sendDone <- err
			return false
		default:
			return true
		}
	}
	// Sample while the transfer runs: stat by PID from this namespace and
	// by --dev from A's, and scrapes.
	var stats, scrapes []float64
	deadline := time.Now().Add(time.Minute)
	for running() && time.Now().Before(deadline) {
		var rep *stat.Reply
		if len(stats)%2 == 0 {
			rep = statJSON(strconv.Itoa(pid))
		} else {
			r := runCmd(t, topo.A.NS.Command(t.Context(), binary, "stat", "--json", "--dev", topo.A.Name))
			rep = &stat.Reply{}
			if err := json.Unmarshal([]byte(r.stdout), rep); r.code != 0 || err != nil || rep.PID != pid {
				t.Fatalf("stat --dev %s in its namespace: exit %d, %v: %s %s", topo.A.Name, r.code, err, r.stdout, r.stderr)
			}
		}
		v, _ := rep.Counters.Get("sent_pkts")
		m := scrape()
		if running() {
			stats = append(stats, float64(v))
			scrapes = append(scrapes, m)
		}
	}
	if err := <-sendDone; err != nil {
		t.Fatalf("send: %v: %s", err, sendErr.String())
	}
	sendDone <- nil
	after := statJSON(strconv.Itoa(pid))
	scrapeN := scrape()
	t.Logf("sent_pkts by stat: %v; by scrape: %v", stats, scrapes)
	if len(stats) < 3 {
		t.Fatalf("only %d samples during the transfer: %v", len(stats), stats)
	}
	sv0, _ := before.Counters.Get("sent_pkts")
	svN, _ := after.Counters.Get("sent_pkts")
	rising(t, "stat sent_pkts", append(append([]float64{float64(sv0)}, stats...), float64(svN)))
	rising(t, "rdma_sent_pkts_total", append(append([]float64{scrape0}, scrapes...), scrapeN))
	for _, name := range []string{"rcvd_pkts", "rx_bytes"} {
		b, _ := before.Counters.Get(name)
		a, _ := after.Counters.Get(name)
		if a <= b {
			t.Errorf("%s did not rise over the transfer: %d then %d", name, b, a)
		}
	}
	if b, _ := before.XDP.Get("xdp_redirected"); func() bool { a, _ := after.XDP.Get("xdp_redirected"); return a <= b }() {
		t.Errorf("xdp_redirected did not rise: %v then %v", before.XDP, after.XDP)
	}

	// The capture is whole up to the request just served.
	waitOutput(t, &s.out, "received big")
	if v := runBinary(t, "dump", "--verify", capFile); v.code != 0 || !strings.Contains(v.stderr, "verify: ") || strings.Contains(v.stderr, " 0 RoCE frames") {
		t.Errorf("dump --verify of the running serve's capture: exit %d: %s", v.code, v.stderr)
	}

	s.stop(t)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("stat socket after serve exited: %v", err)
	}
	if r := runBinary(t, "stat", strconv.Itoa(pid)); r.code != 1 || !strings.Contains(r.stderr, "stat socket") {
		t.Errorf("stat of the exited serve: exit %d: %s", r.code, r.stderr)
	}
}

// rising checks that no sample is below the one before and that the
// samples taken during the transfer (all but the first and the last) rose
// at least twice.
func rising(t *testing.T, what string, v []float64) {
	t.Helper()
	rises := 0
	for i := 1; i < len(v); i++ {
		if v[i] < v[i-1] {
			t.Errorf("%s fell between samples %d and %d: %v", what, i-1, i, v)
			return
		}
		if i < len(v)-1 && i > 1 && v[i] > v[i-1] {
			rises++
		}
	}
	if rises < 2 {
		t.Errorf("%s rose %d times in the samples taken during the transfer, want 2 or more: %v", what, rises, v)
	}
}

// scrapeIn fetches http://addr/metrics from inside ns: the connection is
// made on a thread in ns, the request goes over it from here.
func scrapeIn(ns *netlab.NS, addr string) (string, error) {
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		return "", fmt.Errorf("scrape: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://"+addr+"/metrics", nil)
	if err := req.Write(c); err != nil {
		return "", fmt.Errorf("scrape: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return "", fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&b); err != nil {
		return "", fmt.Errorf("scrape: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape: %s: %s", resp.Status, b.String())
	}
	return b.String(), nil
}

func lsDir(dir string) []string {
	var names []string
	des, _ := os.ReadDir(dir)
	for _, d := range des {
		names = append(names, d.Name())
	}
	return names
}
