package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// pairRun is one side of a server/client pair of processes.
type pairRun struct {
	result
	took time.Duration // from the client's start to this side's exit
}

// runAgreePair starts the server words in topo.A, then the client words in
// topo.B (with A's address appended), both over --link udp, and returns both
// when both have exited (killed after limit).
func runAgreePair(t *testing.T, topo *netlab.Topo, limit time.Duration, srv, cli []string) (s, c pairRun) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	sargs := append([]string{srv[0], "--dev", topo.A.Name, "--link", "udp"}, srv[1:]...)
	scmd := topo.A.NS.Command(ctx, binary, sargs...)
	var so, se bytes.Buffer
	scmd.Stdout, scmd.Stderr = &so, &se
	if err := scmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sdone := make(chan error, 1)
	go func() { sdone <- scmd.Wait(); s.took = time.Since(start) }()
	cargs := append(append([]string{cli[0], "--dev", topo.B.Name, "--link", "udp"}, cli[1:]...), topo.A.IPv4.String())
	c.result = runCmd(t, topo.B.NS.Command(ctx, binary, cargs...))
	c.took = time.Since(start)
	serr := <-sdone
	s.result = result{so.String(), se.String(), exitCode(serr)}
	return s, c
}

// errorLine checks that a side failed with exit status 1 and that the last
// line of its standard error is the one error line, containing want.
func errorLine(t *testing.T, who string, r pairRun, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	if r.code != 1 || strings.Count(r.stderr, "xdproce: ") != 1 || !strings.HasPrefix(last, "xdproce: ") || !strings.Contains(last, want) {
		t.Errorf("%s: exit %d after %v, stderr %q; want exit 1 and one error line with %q", who, r.code, r.took.Round(time.Millisecond), r.stderr, want)
	}
}

// TestPrivilegedBenchAgreeMismatch (issue 14, must-show 4): two xdproce
// processes given different values for the same bench or pingpong
// parameter both exit 1 within 10 s, each with one line naming both values.
// Before: a send server with more --iters than the client waited forever; a
// --qps mismatch printed a result on the server and exited 0 there.
func TestPrivilegedBenchAgreeMismatch(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	for _, tc := range []struct {
		name     string
		srv, cli []string
		want     string
	}{
		{"size", []string{"bench", "write", "--size", "4096"}, []string{"bench", "write", "--size", "3000"}, "client --size 3000, server --size 4096"},
		{"send-iters", []string{"bench", "send", "--size", "1000", "--iters", "500"}, []string{"bench", "send", "--size", "1000", "--iters", "300"}, "client --iters 300, server --iters 500"},
		{"qps", []string{"bench", "write", "--qps", "1"}, []string{"bench", "write", "--qps", "2"}, "client --qps 2, server --qps 1"},
		{"perftest-flags", []string{"bench", "write", "-s", "4096"}, []string{"bench", "write", "--size", "3000"}, "client --size 3000, server --size 4096"},
		{"op", []string{"bench", "write"}, []string{"bench", "read"}, `the client runs "read", this server "write"`},
		{"pingpong", []string{"pingpong", "-s", "4096"}, []string{"pingpong", "-s", "3000"}, "client -s 3000, server -s 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := runAgreePair(t, topo, 30*time.Second, tc.srv, tc.cli)
			t.Logf("server:\n%s\nclient:\n%s", s.stderr, c.stderr)
			errorLine(t, "server", s, "parameters differ: "+tc.want)
			errorLine(t, "client", c, "server: parameters differ: "+tc.want)
			for who, r := range map[string]pairRun{"server": s, "client": c} {
				if r.took > 10*time.Second {
					t.Errorf("%s exited after %v, want within 10 s", who, r.took)
				}
				if r.stdout != "" {
					t.Errorf("%s printed a result: %q", who, r.stdout)
				}
			}
		})
	}
}

// ranAgreed checks that both sides of a bench pair exited 0 and that each
// one's JSON result is a run of bytes × iters on qps queue pairs.
func ranAgreed(t *testing.T, s, c pairRun, bytes, iters, qps int) {
	t.Helper()
	if s.code != 0 || c.code != 0 {
		t.Fatalf("server exit %d: %s\nclient exit %d: %s", s.code, s.stderr, c.code, c.stderr)
	}
	for who, r := range map[string]pairRun{"server": s, "client": c} {
		var x benchResult
		if err := json.Unmarshal([]byte(r.stdout), &x); err != nil {
			t.Fatalf("%s output %q: %v", who, r.stdout, err)
		}
		if x.Bytes != bytes || x.Iters != iters || x.QPs != qps || x.Rate <= 0 {
			t.Errorf("%s ran %d B × %d on %d queue pairs, want %d B × %d on %d", who, x.Bytes, x.Iters, x.QPs, bytes, iters, qps)
		}
	}
}

// TestPrivilegedBenchAgreeAdopt: a server not given --size, --iters or --qps
// takes the client's (a server given one keeps it and the client takes it),
// and the pingpong help's own example pair (server without -s, client -s
// 3000) runs.
func TestPrivilegedBenchAgreeAdopt(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	t.Run("bench", func(t *testing.T) {
		s, c := runAgreePair(t, topo, 60*time.Second, []string{"bench", "send", "--json", "--iters", "200"},
			[]string{"bench", "send", "--json", "--size", "1000", "--qps", "2"})
		ranAgreed(t, s, c, 1000, 200, 2)
		if !strings.Contains(s.stderr, "agreed with the xdproce peer on 1000 B, 200 iterations, 2 queue pair(s)") ||
			!strings.Contains(c.stderr, "agreed with the xdproce peer on 1000 B, 200 iterations, 2 queue pair(s)") {
			t.Errorf("the agreement is not named: server %q, client %q", s.stderr, c.stderr)
		}
	})
	// Values given only to the server are the client's too: it opens the
	// server's --qps connections.
	t.Run("server-values", func(t *testing.T) {
		s, c := runAgreePair(t, topo, 60*time.Second, []string{"bench", "write", "--json", "--qps", "2", "-s", "4096", "-n", "50"},
			[]string{"bench", "write", "--json"})
		ranAgreed(t, s, c, 4096, 50, 2)
	})
	// -a on the client: the server, given no size, runs every size with it.
	t.Run("sweep", func(t *testing.T) {
		s, c := runAgreePair(t, topo, 120*time.Second, []string{"bench", "write", "--json"}, []string{"bench", "write", "--json", "-a", "-n", "5"})
		if s.code != 0 || c.code != 0 {
			t.Fatalf("server exit %d: %s\nclient exit %d: %s", s.code, s.stderr, c.code, c.stderr)
		}
		for who, r := range map[string]pairRun{"server": s, "client": c} {
			rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(rows) != 23 {
				t.Fatalf("%s printed %d rows, want 23 (2 B to 8 MiB)", who, len(rows))
			}
			for i, row := range rows {
				var x benchResult
				if err := json.Unmarshal([]byte(row), &x); err != nil {
					t.Fatalf("%s row %d %q: %v", who, i, row, err)
				}
				if x.Bytes != 2<<i || x.Iters != 5 || x.Rate <= 0 {
					t.Errorf("%s row %d: %d B × %d, rate %f; want %d B × 5", who, i, x.Bytes, x.Iters, x.Rate, 2<<i)
				}
			}
		}
	})
	// -D on the client: runs growing tenfold from 100 messages measure the
	// rate, then the rest of the duration; the server takes every run's
	// iterations, and both report all of them over about the duration.
	t.Run("duration", func(t *testing.T) {
		s, c := runAgreePair(t, topo, 60*time.Second, []string{"bench", "write", "--json"}, []string{"bench", "write", "--json", "-D", "2", "-s", "4096"})
		if s.code != 0 || c.code != 0 {
			t.Fatalf("server exit %d: %s\nclient exit %d: %s", s.code, s.stderr, c.code, c.stderr)
		}
		t.Logf("client: %s%s", c.stdout, c.stderr)
		var x, y benchResult
		if err := json.Unmarshal([]byte(c.stdout), &x); err != nil {
			t.Fatalf("client output %q: %v", c.stdout, err)
		}
		if err := json.Unmarshal([]byte(s.stdout), &y); err != nil {
			t.Fatalf("server output %q: %v", s.stdout, err)
		}
		if x.Bytes != 4096 || x.Iters <= 1100 || y.Iters != x.Iters || y.Bytes != 4096 || x.Rate <= 0 || y.Rate <= 0 {
			t.Errorf("client %d B × %d, server %d B × %d; want 4096 B, the same iterations, more than the first runs' 1100", x.Bytes, x.Iters, y.Bytes, y.Iters)
		}
		if x.Seconds < 1.9 || x.Seconds > 4 || y.Seconds < 1.9 || y.Seconds > 4 {
			t.Errorf("the -D 2 runs took %.2f s (client), %.2f s (server)", x.Seconds, y.Seconds)
		}
		if !strings.Contains(c.stderr, "bench write: -D 2: ") || !strings.Contains(c.stderr, " messages in all took ") {
			t.Errorf("client stderr does not name the runs: %q", c.stderr)
		}
	})
	// An ib_write_bw command line works as 'xdproce bench write': -d names
	// the interface, -x the GID, -m the MTU, -p the port, and
	// --report_gbits gives --perftest's table in Gb/s.
	t.Run("perftest-command-line", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		common := []string{"--link", "udp", "-x", "1", "-m", "512", "-F", "-p", "18600", "-s", "4096", "-n", "100", "--perftest", "--report_gbits"}
		srv := topo.A.NS.Command(ctx, binary, append([]string{"bench", "write", "-d", topo.A.Name}, common...)...)
		var so, se bytes.Buffer
		srv.Stdout, srv.Stderr = &so, &se
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		c := runCmd(t, topo.B.NS.Command(ctx, binary, append([]string{"bench", "write", "-d", topo.B.Name, topo.A.IPv4.String()}, common...)...))
		serr := srv.Wait()
		if c.code != 0 || serr != nil {
			t.Fatalf("client exit %d: %s\nserver %v: %s", c.code, c.stderr, serr, se.String())
		}
		if !strings.Contains(se.String(), "on port 18600") {
			t.Errorf("server stderr %q does not name port 18600", se.String())
		}
		for who, out := range map[string]string{"server": so.String(), "client": c.stdout} {
			for _, want := range []string{" Mtu             : 512[B]\n", " GID index       : 1\n", "BW peak[Gb/sec]    BW average[Gb/sec]", "\n 4096       100 "} {
				if !strings.Contains(out, want) {
					t.Errorf("%s output lacks %q:\n%s", who, want, out)
				}
			}
		}
	})
	t.Run("pingpong-help-example", func(t *testing.T) {
		s, c := runAgreePair(t, topo, 60*time.Second, []string{"pingpong"}, []string{"pingpong", "-g", "1", "-s", "3000", "-n", "20"})
		if s.code != 0 || c.code != 0 {
			t.Fatalf("server exit %d: %s\nclient exit %d: %s", s.code, s.stderr, c.code, c.stderr)
		}
		checkPingpong(t, 3000, 20, s.stdout, s.stderr, c.stdout, c.stderr)
	})
}

// TestPrivilegedBenchAgainstServe: bench and pingpong clients that reach an
// 'xdproce serve' say that it is a file server, and serve names what
// reached it, instead of a protocol error on both ends.
func TestPrivilegedBenchAgainstServe(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	srv := startServer(t, topo)
	for _, args := range [][]string{{"bench", "write"}, {"pingpong"}} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		cmd := topo.B.NS.Command(ctx, binary, append(append([]string{args[0], "--dev", topo.B.Name, "--link", "udp"}, args[1:]...), topo.A.IPv4.String())...)
		r := runCmd(t, cmd)
		cancel()
		t.Logf("%s: %s", args, r.stderr)
		oneErrorLine(t, fmt.Sprint(args), r, 1, "that is an xdproce file server ('xdproce serve')")
	}
	srv.stop(t)
	t.Logf("serve:\n%s", srv.errb.String())
	for _, want := range []string{"perftest's exchange", "ibv_*_pingpong's exchange"} {
		if !strings.Contains(srv.errb.String(), want) {
			t.Errorf("serve's log does not say %q: %s", want, srv.errb.String())
		}
	}
}
