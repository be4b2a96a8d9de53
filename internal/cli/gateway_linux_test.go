package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

var long = flag.Bool("long", false, "run the long variants (the gateway's 200 MiB file, 10,000 ucmatose connections)")

// TestPrivilegedGateway: curl PUTs files of 0 B, 1 B and 16 MiB (200 MiB
// with -long) through 'xdproce gateway' (with curl in member 1 of a star)
// to 'xdproce serve' (member 0) and GETs them back byte-exact; on the
// bridge port of the node's leg, which sees the RoCE an AF_XDP capture
// would miss, the large file's PUT and GET each put under 0.5 % of its
// bytes on TCP and at least all of them in RoCE. Then a range, and the
// error statuses.
func TestPrivilegedGateway(t *testing.T) {
	testenv.Privileged(t)
	testenv.Tool(t, "curl", "install curl")
	star := netlab.StarT(t, netlab.StarConfig{Members: 2, Link: netlab.LinkConfig{MTU: 9000}})
	node, gw, port := star.Members[0], star.Members[1], star.Ports[0]
	dir, work := t.TempDir(), t.TempDir()
	key := filepath.Join(work, "key")
	os.WriteFile(key, []byte("the gateway test's pre-shared key\n"), 0o600)

	srv := startIn(t, node.NS, "serve", "--dev", node.Name, "--link", "xsk", "--dir", dir, "--psk-file", key)
	// No --dev: the gateway takes the interface of the route to the node.
	g := startIn(t, gw.NS, "gateway", "--link", "xsk", "--listen", "127.0.0.1:0",
		"--node", node.IPv4.String(), "--psk-file", key, "--connect-timeout", "10s")
	waitOutput(t, &g.errb, "gateway on http://")
	m := regexp.MustCompile(`gateway on (http://[0-9.:]+) for node [0-9.]+, over ` + gw.Name + ` `).FindStringSubmatch(g.errb.String())
	if m == nil {
		t.Fatalf("gateway start-up line: %q", g.errb.String())
	}
	url := m[1]

	// curl runs in the gateway's namespace; it prints the status last.
	curl := func(args ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := gw.NS.Command(ctx, "curl", append([]string{"-sS", "-w", "\n%{http_code}"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl %v: %v %s", args, err, stderr.Bytes())
		}
		s := string(out)
		i := strings.LastIndexByte(s, '\n')
		code, _ := strconv.Atoi(s[i+1:])
		return code, s[:i]
	}

	big := 16 << 20
	if *long {
		big = 200 << 20
	}
	for i, n := range []int{0, 1, big} {
		name := fmt.Sprintf("file%d", i)
		src, back := filepath.Join(work, name), filepath.Join(work, name+".back")
		data := writeFile(t, src, n, uint64(i+40))
		var cnt *netlab.Counter
		count := func() {
			var err error
			if cnt, err = port.Count(); err != nil {
				t.Fatal(err)
			}
		}
		check := func(what string, took time.Duration) {
			c, err := cnt.Stop()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s of %d bytes in %v: on the node's leg TCP %d bytes in %d frames (%.4f %% of the file), RoCE %d bytes in %d frames, other %d bytes; dropped %d",
				what, n, took.Round(time.Millisecond), c.TCPBytes, c.TCPFrames, 100*float64(c.TCPBytes)/float64(n), c.RoCEBytes, c.RoCEFrames, c.OtherBytes, c.Dropped)
			if c.Dropped != 0 {
				t.Errorf("%s: the counter dropped %d frames: counts incomplete", what, c.Dropped)
			}
			if float64(c.TCPBytes) >= 0.005*float64(n) || c.RoCEBytes < int64(n) {
				t.Errorf("%s of %d bytes: TCP carried %d bytes (want under 0.5 %%), RoCE %d (want at least the file)", what, n, c.TCPBytes, c.RoCEBytes)
			}
		}
		if n == big {
			count()
		}
		start := time.Now()
		if code, out := curl("-T", src, url+"/"+name); code != 201 || !strings.Contains(out, fmt.Sprintf("stored %s: %d bytes", name, n)) {
			t.Fatalf("PUT %d bytes: %d %q\ngateway: %s\nnode: %s", n, code, out, g.errb.String(), srv.errb.String())
		}
		if n == big {
			check("PUT", time.Since(start))
		}
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the node stored %d bytes (%v), want %d byte-exact", len(got), err, n)
		}
		if n == big {
			count()
		}
		start = time.Now()
		if code, out := curl("-o", back, url+"/"+name); code != 200 {
			t.Fatalf("GET %d bytes: %d %q", n, code, out)
		}
		if n == big {
			check("GET", time.Since(start))
		}
		if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("GET gave %d bytes (%v), want %d byte-exact", len(got), err, n)
		}
		os.Remove(back)
		if n == big {
			// A range of it, and the gateway's memory.
			code, out := curl("-r", "1000-1999", "-o", back, "-D", "-", url+"/"+name)
			got, _ := os.ReadFile(back)
			if code != 206 || !strings.Contains(out, fmt.Sprintf("Content-Range: bytes 1000-1999/%d", n)) || !bytes.Equal(got, data[1000:2000]) {
				t.Errorf("GET range 1000-1999: %d, %d bytes, headers %q", code, len(got), out)
			}
			hwm := vmHWM(t, g.cmd.Process.Pid)
			t.Logf("gateway peak RSS %d MiB after %d MiB through it each way", hwm>>20, n>>20)
			if *long && hwm > int64(n)/2 {
				t.Errorf("gateway peak RSS %d bytes after a %d-byte file: not streamed", hwm, n)
			}
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{url + "/missing"}, 404, `no file "missing"`},
		{[]string{"-T", filepath.Join(work, "file1"), url + "/file1"}, 409, "exists"},
		{[]string{"-r", "5-", url + "/file1"}, 416, "the file has 1 bytes"},
		{[]string{"-X", "DELETE", url + "/file1"}, 405, "GET and PUT"},
	} {
		if code, out := curl(c.args...); code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("curl %v: %d %q, want %d with %q", c.args, code, out, c.code, c.want)
		}
	}
	// The node gone: 502.
	srv.stop(t)
	if code, out := curl(url + "/file1"); code != 502 || !strings.Contains(out, "unreachable") {
		t.Errorf("GET with the node stopped: %d %q, want 502", code, out)
	}
	g.stop(t)
	for _, want := range []string{"PUT /file2 201", "GET /file2 200", "GET /file2 206", "GET /missing 404"} {
		if !strings.Contains(g.out.String(), want) {
			t.Errorf("gateway output lacks %q:\n%s", want, g.out.String())
		}
	}
}

// vmHWM is the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmHWM in /proc/%d/status", pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}
