package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPrivilegedInteropPerftestCM: perftest's rdma_cm mode (-R) against `xdproce bench -R`:
// ib_write_bw, ib_read_bw and ib_send_bw at 4096 B x 100 and 65536 B x 20 with PMTU 1024,
// ib_atomic_bw (FETCH_AND_ADD) and ib_send_lat (64 B) x 100, xdproce as server and as client
// over AF_XDP. The control connection and the test queue pair's both go through the
// RDMA CM (QP1 MADs), perftest's exchange as SENDs on the control queue pair (issue 19).
func TestPrivilegedInteropPerftestCM(t *testing.T) {
	suiteEnabled(t)
	var note string
	recordIf(t, true, "perftest -R (all)", "every run", "both", "xsk", &note)
	needCommand(t, xdproceBin(t), &note, "bench", "write", "-R", "--perftest")
	needGuest(t) // boots the guest once, before the runs
	type tc struct {
		tool, op, bench    string
		size, iters        int
		extraTool, extraXd []string
	}
	var cases []tc
	for _, b := range []tc{{tool: "ib_write_bw", op: "RDMA WRITE", bench: "write"}, {tool: "ib_read_bw", op: "RDMA READ", bench: "read"},
		{tool: "ib_send_bw", op: "SEND", bench: "send"}} {
		for _, s := range []struct{ size, iters int }{{4096, 100}, {65536, 20}} {
			b.size, b.iters = s.size, s.iters
			cases = append(cases, b)
		}
	}
	cases = append(cases,
		tc{tool: "ib_atomic_bw", op: "FETCH_AND_ADD", bench: "atomic", size: 8, iters: 100,
			extraTool: []string{"-A", "FETCH_AND_ADD"}, extraXd: []string{"--atomic-type", "FETCH_AND_ADD"}},
		tc{tool: "ib_send_lat", op: "SEND", bench: "lat", size: 64, iters: 100})
	for _, c := range cases {
		size, iters := c.size, c.iters
		for _, srv := range []bool{true, false} {
			op := fmt.Sprintf("%s %d B x%d", c.op, size, iters)
			t.Run(fmt.Sprintf("%s-R/%s/xdproce-%s", c.tool, strings.ReplaceAll(op, " ", "_"), role(srv)), func(t *testing.T) {
				g := needGuest(t) // again: reboots the guest if the path to it died
				note := ""
				record(t, c.tool+" -R", op, role(srv), "xsk", &note)
				row := perftestRow(size, iters)
				p := pair{
					tool:      c.tool,
					toolArgs:  append([]string{"-d", "rxe0", "-x", "$XI_GID_INDEX", "-R", "-n", fmt.Sprint(iters), "-s", fmt.Sprint(size), "-m", "1024"}, c.extraTool...),
					xdArgs:    append([]string{"bench", c.bench, "-R", "--perftest", "--size", fmt.Sprint(size), "--iters", fmt.Sprint(iters)}, c.extraXd...),
					needWords: []string{"bench", c.bench, "-R", "--perftest"},
					xdServer:  srv, link: "xsk", timeout: 120 * time.Second,
					// xdproce prints its line once it listens on the rdma_cm port; perftest's
					// listening cm_id shows in the guest's `rdma resource show cm_id`.
					hostReady: func(t *testing.T, x *hostProc) {
						waitHost(t, x, "waiting for the client on rdma_cm port", 30*time.Second)
					},
					guestReady: func(t *testing.T, j *job) { g.guestCMListening(t, j, 18515, 60*time.Second) },
					check: func(t *testing.T, toolOut, xdOut string) {
						for who, out := range map[string]string{c.tool: toolOut, "xdproce": xdOut} {
							// ib_send_lat's client measures; xdproce's lat server prints no row.
							noRow := who == "xdproce" && c.bench == "lat" && srv
							if !noRow && !row.MatchString(out) || !strings.Contains(out, "Data ex. method : rdma_cm") {
								t.Errorf("%s printed no rdma_cm line or no result row for %d B x%d:\n%s", who, size, iters, out)
							}
						}
					},
				}
				p.note = &note
				p.run(t, g)
			})
		}
	}
}

// waitHost waits until the host program x has printed line, failing t when it exits first or
// timeout passes.
func waitHost(t *testing.T, x *hostProc, line string, timeout time.Duration) {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(x.output(), line) {
			return
		}
		if x.finished() {
			t.Fatalf("xdproce exited before it listened (%v):\n%s", x.err, x.output())
		}
	}
	t.Fatalf("xdproce printed no %q within %v:\n%s", line, timeout, x.output())
}

// guestCMListening waits until an RDMA CM ID listens on port in the guest (rdma_listen), or the
// server job ends first (its output then says why).
func (g *guest) guestCMListening(t *testing.T, server *job, port int, timeout time.Duration) {
	t.Helper()
	probe := g.start(t, fmt.Sprintf("for i in $(seq %d); do rdma resource show cm_id | grep -q 'state LISTEN .*:%d ' && exit 0; read -r -t 0.1 < /run/nap; done; exit 1",
		int(timeout/(100*time.Millisecond)), port))
	for !probe.finished() {
		if server.finished() {
			out, rc, _ := server.wait(time.Second)
			t.Fatalf("guest server exited (rc %d) before listening:\n%s", rc, out)
		}
		if !g.alive() {
			t.Fatal("the guest died")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, rc, _ := probe.wait(time.Second); rc != 0 {
		t.Fatalf("guest: no RDMA CM ID listens on port %d after %v; server output:\n%s", port, timeout, server.output())
	}
}
