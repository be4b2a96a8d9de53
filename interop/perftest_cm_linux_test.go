package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPrivilegedInteropPerftestCM: perftest's rdma_cm mode (-R) against `xdproce bench -R`:
// ib_write_bw, ib_read_bw and ib_send_bw at 4096 B x 100 and 65536 B x 20 with PMTU 1024,
// ib_atomic_bw (FETCH_AND_ADD) and ib_send_lat (64 B) x 100, and the three bandwidth tests with
// four test queue pairs (-q 4: one control connection, then one CM connection a queue pair;
// perftest reports iterations x queue pairs), xdproce as server and as client over AF_XDP. The control connection and the test queue pair's both go through the
// RDMA CM (QP1 MADs), perftest's exchange as SENDs on the control queue pair (issue 19).
func TestPrivilegedInteropPerftestCM(t *testing.T) {
	suiteEnabled(t)
	var note string
	recordIf(t, true, "perftest -R (all)", "every run", "both", "xsk", &note)
	needCommand(t, xdproceBin(t), &note, "bench", "write", "-R", "--perftest")
	needGuest(t) // boots the guest once, before the runs
	type tc struct {
		tool, op, bench    string
		size, iters, qps   int
		extraTool, extraXd []string
	}
	var cases []tc
	for _, b := range []tc{{tool: "ib_write_bw", op: "RDMA WRITE", bench: "write"}, {tool: "ib_read_bw", op: "RDMA READ", bench: "read"},
		{tool: "ib_send_bw", op: "SEND", bench: "send"}} {
		for _, s := range []struct{ size, iters, qps int }{{4096, 100, 1}, {65536, 20, 1}, {4096, 100, 4}} {
			b.size, b.iters, b.qps = s.size, s.iters, s.qps
			if s.qps > 1 {
				q := fmt.Sprint(s.qps)
				b.extraTool, b.extraXd = []string{"-q", q}, []string{"-q", q}
			}
			cases = append(cases, b)
		}
	}
	cases = append(cases,
		tc{tool: "ib_atomic_bw", op: "FETCH_AND_ADD", bench: "atomic", size: 8, iters: 100, qps: 1,
			extraTool: []string{"-A", "FETCH_AND_ADD"}, extraXd: []string{"--atomic-type", "FETCH_AND_ADD"}},
		tc{tool: "ib_send_lat", op: "SEND", bench: "lat", size: 64, iters: 100, qps: 1})
	for _, c := range cases {
		size, iters := c.size, c.iters
		for _, srv := range []bool{true, false} {
			op := fmt.Sprintf("%s %d B x%d", c.op, size, iters)
			if c.qps > 1 {
				op += fmt.Sprintf(" q%d", c.qps)
			}
			t.Run(fmt.Sprintf("%s-R/%s/xdproce-%s", c.tool, strings.ReplaceAll(op, " ", "_"), role(srv)), func(t *testing.T) {
				g := needGuest(t) // again: reboots the guest if the path to it died
				note := ""
				record(t, c.tool+" -R", op, role(srv), "xsk", &note)
				row := perftestRow(size, iters*c.qps)
				p := pair{
					tool:      c.tool,
					toolArgs:  append([]string{"-d", "rxe0", "-x", "$XI_GID_INDEX", "-R", "-n", fmt.Sprint(iters), "-s", fmt.Sprint(size), "-m", "1024"}, c.extraTool...),
					xdArgs:    append([]string{"bench", c.bench, "-R", "--perftest", "--size", fmt.Sprint(size), "--iters", fmt.Sprint(iters)}, c.extraXd...),
					needWords: []string{"bench", c.bench, "-R", "--perftest"},
					xdServer:  srv, link: "xsk", timeout: 120 * time.Second,
					// xdproce prints its line once it listens on the rdma_cm port; perftest's
					// listening cm_id shows in the guest's `rdma resource show cm_id`.
					hostReady: func(t *testing.T, x *hostProc) {
						if err := waitHost(x, 30*time.Second, "waiting for the client on rdma_cm port"); err != nil {
							t.Fatalf("xdproce bench -R server: %v:\n%s", err, x.output())
						}
					},
					guestReady: func(t *testing.T, j *job) { g.cmListening(t, j, 18515, 60*time.Second) },
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
