package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

func TestBenchUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--dev", "lo"}, "want TEST [HOST]"},
		{[]string{"bench", "flood", "--dev", "lo"}, `unknown test "flood"`},
		{[]string{"bench", "atomic", "--dev", "lo", "--size", "16"}, "atomics move 8 bytes"},
		{[]string{"bench", "send", "--dev", "lo", "--iters", "100000"}, "--iters 100000"},
		{[]string{"bench", "write", "--dev", "lo", "--qps", "0"}, "--qps 0"},
		{[]string{"bench", "atomic", "--dev", "lo", "--atomic-op", "xor"}, `--atomic-op "xor"`},
		{[]string{"bench", "write", "a", "b", "--dev", "lo"}, "want TEST [HOST]"},
		// An explicit 0 is a mistake, not the default (it used to run the default silently).
		{[]string{"bench", "write", "--dev", "lo", "--size", "0"}, "--size 0: want 1 byte to 1GiB"},
		{[]string{"bench", "write", "--dev", "lo", "-s", "0"}, "--size 0: want 1 byte to 1GiB"},
		{[]string{"bench", "atomic", "--dev", "lo", "--size", "0"}, "--size 0: want 1 byte to 1GiB"},
		{[]string{"bench", "write", "--dev", "lo", "--iters", "0"}, "--iters 0: want at least 1"},
		{[]string{"bench", "lat", "--dev", "lo", "-n", "0"}, "--iters 0: want at least 1"},
		{[]string{"bench", "write", "--dev", "lo", "-q", "0"}, "--qps 0"},
		{[]string{"bench", "lat", "--dev", "lo", "-R", "-q", "2"}, "-R lat runs one queue pair"},
		{[]string{"bench", "write", "--dev", "lo", "-R", "-a"}, "-R runs one size by iterations"},
		{[]string{"bench", "send", "--dev", "lo", "-R", "-D", "3"}, "-R runs one size by iterations"},
		{[]string{"bench", "write", "--dev", "lo", "-R", "--mode", "ooo"}, "-R: --mode ooo needs xdproce's own exchange"},
		{[]string{"bench", "write", "--dev", "lo", "-m", "1500"}, "-m 1500: want 256"},
		{[]string{"bench", "write", "--dev", "lo", "-x", "-2"}, "-x -2"},
		{[]string{"bench", "write", "--dev", "lo", "--report_gbits"}, "--report_gbits is for --perftest"},
		{[]string{"bench", "write", "--dev", "lo", "-a", "--size", "4096"}, "-a runs every size; give no --size"},
		{[]string{"bench", "atomic", "--dev", "lo", "-a"}, "-a: atomics move 8 bytes"},
		{[]string{"bench", "write", "--dev", "lo", "-D", "5", "-n", "100"}, "-D sets the iterations; give no --iters"},
		{[]string{"bench", "write", "--dev", "lo", "-D", "-1"}, "-D -1: want a positive number of seconds"},
		{[]string{"bench", "write", "--dev", "lo", "-D", "5", "-a"}, "-D and -a exclude each other"},
		{[]string{"bench", "write", "--dev", "lo", "-a", "--perftest"}, "-a prints xdproce's table"},
		{[]string{"bench", "write", "--dev", "lo", "--mode", "uc"}, `--mode "uc": want rc or ooo`},
		{[]string{"bench", "write", "--dev", "lo", "--paths", "4"}, "--paths is for --mode ooo"},
		{[]string{"bench", "write", "--dev", "lo", "--mode", "ooo", "--paths", "65"}, "--paths 65: want 1 to 64"},
		{[]string{"bench", "read", "--dev", "lo", "--mode", "ooo"}, "--mode ooo: read is not built yet"},
		{[]string{"bench", "write", "--dev", "lo", "--mode", "ooo", "--qps", "2"}, "--mode ooo runs one queue pair"},
		{[]string{"bench", "write", "--dev", "lo", "--mode", "ooo", "-D", "2"}, "--mode ooo runs one size by iterations"},
		{[]string{"bench", "write", "--dev", "lo", "--mode", "ooo", "--perftest"}, "--mode ooo has no perftest tool"},
	} {
		oneErrorLine(t, strings.Join(tt.args, " "), runBinary(t, tt.args...), 2, tt.want)
	}
	oneErrorLine(t, "bench on a missing interface", runBinary(t, "bench", "write", "--dev", "nosuch0"), 1, `unknown interface "nosuch0"`)
}

// TestPrivilegedBench runs every test between two namespaces over AF_XDP:
// both ends finish, agree on the sizes, and report plausible figures (the
// bandwidth is what the bytes and the time give; latency percentiles are
// ordered); the client's capture verifies.
func TestPrivilegedBench(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	host := topo.A.IPv4.String()
	for _, tc := range []struct {
		test string
		args []string
	}{
		{"write", []string{"--size", "64KiB", "--iters", "300"}},
		{"write", []string{"--size", "64KiB", "--iters", "300", "--cpu", "0"}}, // progress threads pinned
		{"write", []string{"--size", "4KiB", "--iters", "300", "--qps", "3"}},
		{"read", []string{"--size", "64KiB", "--iters", "300"}},
		{"send", []string{"--size", "1000", "--iters", "300"}},
		{"atomic", []string{"--iters", "300", "--atomic-op", "cmp_swap"}},
		{"lat", []string{"--iters", "200"}},
	} {
		t.Run(tc.test+strings.Join(tc.args, ""), func(t *testing.T) {
			srv := topo.A.NS.Command(t.Context(), binary, append([]string{"bench", tc.test, "--dev", topo.A.Name, "--link", "xsk", "--json"}, tc.args...)...)
			var so, se bytes.Buffer
			srv.Stdout, srv.Stderr = &so, &se
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			capPath := filepath.Join(t.TempDir(), "bench.pcapng")
			r := runCmd(t, clientCmd(topo, append([]string{"bench", "--json", "--capture", capPath, tc.test, host}, tc.args...)...))
			serr := srv.Wait()
			if r.code != 0 || serr != nil {
				t.Fatalf("client exit %d: %s\nserver %v: %s", r.code, r.stderr, serr, se.String())
			}
			var c, s benchResult
			if err := json.Unmarshal([]byte(r.stdout), &c); err != nil {
				t.Fatalf("client output %q: %v", r.stdout, err)
			}
			if err := json.Unmarshal(so.Bytes(), &s); err != nil {
				t.Fatalf("server output %q: %v", so.String(), err)
			}
			for _, x := range []benchResult{c, s} {
				if x.Schema != 1 || x.Test != tc.test || x.Iters == 0 || x.Bytes == 0 || x.QPs != c.QPs ||
					x.Rate <= 0 || !strings.HasPrefix(x.Link, "AF_XDP") || x.PathMTU != 4096 {
					t.Errorf("%s result %+v", x.Role, x)
				}
			}
			if c.Role != "client" || s.Role != "server" || c.Bytes != s.Bytes || c.Iters != s.Iters {
				t.Errorf("client %+v, server %+v", c, s)
			}
			want := float64(c.Iters*c.QPs*c.Bytes) * 8 / c.Seconds / 1e9
			if c.BW < want*0.99 || c.BW > want*1.01 {
				t.Errorf("client BW %.3f Gb/s, bytes and time give %.3f", c.BW, want)
			}
			if tc.test == "lat" && (c.P50 <= 0 || c.P99 < c.P50) {
				t.Errorf("latency p50 %.2f p99 %.2f", c.P50, c.P99)
			}
			if v := runBinary(t, "dump", "--verify", capPath); v.code != 0 || strings.Count(v.stdout, "\n") < c.Iters {
				t.Errorf("dump --verify: exit %d, %d lines: %s", v.code, strings.Count(v.stdout, "\n"), v.stderr)
			}
		})
	}
}
