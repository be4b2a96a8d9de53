package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
)

// result of one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return result{o.String(), e.String(), exitCode(err)}
}

func runBinary(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return runCmd(t, exec.CommandContext(ctx, binary, args...))
}

// oneErrorLine checks that a failed run printed exactly one line, starting
// "xdproce: " and containing want, to stderr, and exited with code.
func oneErrorLine(t *testing.T, what string, r result, code int, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != code || len(lines) != 1 || !strings.HasPrefix(lines[0], "xdproce: ") || !strings.Contains(lines[0], want) {
		t.Errorf("%s: exit %d, stderr %q; want exit %d and one line with %q", what, r.code, r.stderr, code, want)
	}
}

func writeFile(t *testing.T, path string, n int, seed uint64) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1}).Read(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// noPartial fails when dir holds a temporary transfer file or name.
func noPartial(t *testing.T, dir, name string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".part") || name != "" && e.Name() == name {
			t.Errorf("%s left in %s", e.Name(), dir)
		}
	}
}

func TestTransferUsageErrors(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	writeFile(t, f, 10, 1)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "--dev", "lo", "127.0.0.1"}, "want HOST FILE"},
		{[]string{"send", "127.0.0.1", f}, "--dev IF is required"},
		{[]string{"send", "--dev", "lo", "--link", "carrier-pigeon", "127.0.0.1", f}, `unknown link "carrier-pigeon"`},
		{[]string{"send", "--dev", "lo", "--cpu", "1-x", "127.0.0.1", f}, `bad CPU list "1-x"`},
		{[]string{"serve", "--dev", "lo", "--cpu", "3-1"}, `bad CPU list "3-1"`},
		{[]string{"send", "--dev", "lo", "127.0.0.1", f, "--name", "../etc/passwd"}, "--name"},
		{[]string{"send", "--bogus", "--dev", "lo", "127.0.0.1", f}, "flag provided but not defined: -bogus"},
		{[]string{"get", "--dev", "lo", "127.0.0.1"}, "want HOST NAME [FILE]"},
		{[]string{"get", "--dev", "lo", "127.0.0.1", "a/b"}, "NAME"},
		{[]string{"serve", "--dev", "lo", "extra"}, `unexpected argument "extra"`},
		{[]string{"demo", "--size", "lots"}, `parse size "lots"`},
		{[]string{"demo", "--link", "x"}, `unknown link "x"`},
		{[]string{"info", "--bogus"}, "flag provided but not defined"},
		{[]string{"send", "--dev", "lo", "127.0.0.1:99999", f}, `HOST "127.0.0.1:99999": port "99999" is not a number from 1 to 65535`},
		{[]string{"get", "--dev", "lo", "[2001:db8::1]:0", "f"}, `port "0"`},
		{[]string{"serve", "--dev", "lo", "--insecure", "--listen", ":99999"}, `--listen ":99999": port "99999"`},
		{[]string{"send", "--dev", "lo", "--tls-fingerprint", "3f9a", "127.0.0.1", f}, `--tls-fingerprint "3f9a": want the 64 hex digits`},
		{[]string{"get", "--dev", "lo", "--tls-fingerprint", strings.Repeat("g", 64), "127.0.0.1", "f"}, "--tls-fingerprint"},
		{[]string{"send", "--dev", "lo", "--tls-cert", f, "127.0.0.1", f}, "--tls-cert and --tls-key go together"},
		{[]string{"serve", "--dev", "lo"}, "no client authentication: give --psk-file FILE or --tls-client-ca FILE, or --insecure"},
		{[]string{"bench", "write", "--dev", "lo", "127.0.0.1:99999"}, `HOST "127.0.0.1:99999": port "99999"`},
		{[]string{"pingpong", "--dev", "lo", "127.0.0.1:0"}, `HOST "127.0.0.1:0": port "0"`},
		{[]string{"get", "--dev", "lo", "127.0.0.1", "a\nb"}, "control characters are refused"},
		{[]string{"send", "--dev", "lo", "--name", "x\ty", "127.0.0.1", f}, "control characters are refused"},
		{[]string{"send", "--dev", "lo", "--mode", "uc", "127.0.0.1", f}, `--mode "uc": want rc or ooo`},
		{[]string{"send", "--dev", "lo", "--paths", "4", "127.0.0.1", f}, "--paths needs --mode ooo"},
		{[]string{"send", "--dev", "lo", "--mode", "ooo", "--paths", "65", "127.0.0.1", f}, "--paths 65: want 1..64"},
		{[]string{"send", "--dev", "lo", "--mode", "ooo", "--enlarge", "127.0.0.1", f}, "--mode ooo and --enlarge exclude each other"},
		{[]string{"get", "--dev", "lo", "--mode", "ooo", "--enlarge", "127.0.0.1", "f"}, "--mode ooo and --enlarge exclude each other"},
	} {
		oneErrorLine(t, strings.Join(tt.args, " "), runBinary(t, tt.args...), 2, tt.want)
	}
	for _, c := range []string{"serve", "send", "get", "demo", "info"} {
		r := runBinary(t, c, "-h")
		if r.code != 0 || !strings.Contains(r.stdout, "USAGE\n  xdproce "+c) || !strings.Contains(r.stdout, "EXAMPLES") {
			t.Errorf("%s -h: exit %d, %q", c, r.code, r.stdout)
		}
	}
}

// TestTransferBadInput: failures before any transfer give one error line,
// exit 1 and no file.
func TestTransferBadInput(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	writeFile(t, f, 10, 1)
	oneErrorLine(t, "missing file", runBinary(t, "send", "--dev", "lo", "--link", "udp", "127.0.0.1", filepath.Join(dir, "nope")), 1,
		"no such file or directory")
	oneErrorLine(t, "unknown interface", runBinary(t, "send", "--dev", "nosuch0", "127.0.0.1", f), 1, `unknown interface "nosuch0"`)
	oneErrorLine(t, "a CPU the process may not use", runBinary(t, "send", "--dev", "lo", "--link", "udp", "--cpu", "4095", "127.0.0.1", f), 1,
		"cpu 4095 is not one this process may run on")
	oneErrorLine(t, "unknown interface", runBinary(t, "get", "--dev", "nosuch0", "127.0.0.1", "f", filepath.Join(dir, "g")), 1, `unknown interface "nosuch0"`)
	oneErrorLine(t, "serve into a missing directory", runBinary(t, "serve", "--dev", "lo", "--insecure", "--dir", filepath.Join(dir, "nope")), 1, "not a directory")
	oneErrorLine(t, "info of a missing interface", runBinary(t, "info", "nosuch0"), 1, `unknown interface "nosuch0"`)
	noPartial(t, dir, "g")
}

// TestInfoJSON: the loopback interface's GID table follows rxe's order.
func TestInfoJSON(t *testing.T) {
	r := runBinary(t, "info", "--json", "lo")
	if r.code != 0 {
		t.Fatalf("info: exit %d: %s", r.code, r.stderr)
	}
	var rep infoReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if rep.Schema != 1 || len(rep.Interfaces) != 1 {
		t.Fatalf("report %+v", rep)
	}
	lo := rep.Interfaces[0]
	if lo.Name != "lo" || !lo.Loopback || lo.AFXDP.Available || len(lo.GIDs) < 2 ||
		lo.GIDs[0].GID != "fe80::200:ff:fe00:0" || lo.GIDs[1].GID != "::ffff:127.0.0.1" {
		t.Errorf("lo: %+v", lo)
	}
}

// unprivileged returns a maker of commands of the binary that run
// unprivileged (as nobody when the test runs as root), with TMPDIR a new
// directory it can write, also returned.
func unprivileged(t *testing.T) (cmdFor func(args ...string) *exec.Cmd, dir string) {
	dir, err := os.MkdirTemp("", "xdproce-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := binary
	cmdFor = func(args ...string) *exec.Cmd {
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), "TMPDIR="+dir)
		return c
	}
	if os.Geteuid() == 0 {
		// Drop to nobody: the binary and the output directory must be
		// reachable for it.
		bin = filepath.Join(dir, "xdproce")
		data, err := os.ReadFile(binary)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, 0o777)
		cmdFor = func(args ...string) *exec.Cmd {
			c := exec.Command(bin, args...)
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			c.Env = append(os.Environ(), "TMPDIR="+dir)
			return c
		}
	}
	return cmdFor, dir
}

// TestDemoUnprivileged runs the demo as an unprivileged user: it says so and
// moves the data over link/udp on loopback; the capture it writes verifies.
func TestDemoUnprivileged(t *testing.T) {
	cmdFor, dir := unprivileged(t)
	capPath := filepath.Join(dir, "demo.pcapng")
	r := runCmd(t, cmdFor("demo", "--size", "3MiB", "--capture", capPath))
	if r.code != 0 {
		t.Fatalf("demo: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"not running as root", "verified", "link: UDP", "Gb/s", "capture: " + capPath, "every ICRC good"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	if v := runBinary(t, "dump", "--verify", capPath); v.code != 0 {
		t.Errorf("dump --verify %s: exit %d: %s", capPath, v.code, v.stderr)
	}
}

// server is 'xdproce serve' running in a lab namespace.
type server struct {
	cmd  *exec.Cmd
	dir  string
	out  syncBuffer
	errb syncBuffer
	done chan error
}

func startServer(t *testing.T, topo *netlab.Topo, extra ...string) *server {
	t.Helper()
	return startServerIn(t, topo, t.TempDir(), extra...)
}

// startServerIn starts 'xdproce serve' with --dir dir, and --insecure
// unless extra names a way to authenticate clients.
func startServerIn(t *testing.T, topo *netlab.Topo, dir string, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--dev", topo.A.Name, "--dir", dir, "--link", "xsk"}, extra...)
	if !slices.Contains(extra, "--psk-file") && !slices.Contains(extra, "--tls-client-ca") {
		args = append(args, "--insecure")
	}
	s := startIn(t, topo.A.NS, args...)
	s.dir = dir
	return s
}

// startIn starts the binary with args in namespace ns, stopped (SIGINT)
// when the test ends.
func startIn(t *testing.T, ns *netlab.NS, args ...string) *server {
	t.Helper()
	s := &server{done: make(chan error, 1)}
	s.cmd = ns.Command(context.Background(), binary, args...)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.errb
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop interrupts the server (a no-op once it has exited).
func (s *server) stop(t *testing.T) {
	if s.cmd.ProcessState != nil || s.done == nil {
		return
	}
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		t.Errorf("serve did not exit on SIGINT; stderr %s", s.errb.String())
	}
	s.done = nil
}

func (s *server) kill() {
	s.cmd.Process.Kill()
	<-s.done
	s.done = nil
}

func clientCmd(topo *netlab.Topo, args ...string) *exec.Cmd {
	full := append([]string{args[0], "--dev", topo.B.Name, "--link", "xsk"}, args[1:]...)
	return topo.B.NS.Command(context.Background(), binary, full...)
}

// TestPrivilegedSendGet: files of 0 B, 1 B, 1 MiB and 100 MiB go and come
// back byte-exact on lmrm pools (WRITE WITH IMMEDIATE) between two
// namespaces over AF_XDP; the results name the link and the SHA-256; the
// captures both commands write pass dump --verify and show the LMRM_ALLOC
// exchange.
func TestPrivilegedSendGet(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	s := startServer(t, topo)
	srcDir, backDir := t.TempDir(), t.TempDir()
	host := topo.A.IPv4.String()
	sizes := []int{0, 1, 1 << 20, 100 << 20}
	if testing.Short() {
		sizes[3] = 8 << 20
	}
	for i, n := range sizes {
		name := "file" + string(rune('0'+i))
		src := filepath.Join(srcDir, name)
		data := writeFile(t, src, n, uint64(i))
		sum := sha256.Sum256(data)
		capSend := filepath.Join(srcDir, name+".send.pcapng")
		r := runCmd(t, clientCmd(topo, "send", "--json", "--capture", capSend, host, src))
		if r.code != 0 {
			t.Fatalf("send %d bytes: exit %d: %s\nserver: %s", n, r.code, r.stderr, s.errb.String())
		}
		var res struct {
			Size   int64  `json:"size"`
			SHA256 string `json:"sha256"`
			Link   string `json:"link"`
			Peer   string `json:"peer_link"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("send output %q: %v", r.stdout, err)
		}
		if res.Size != int64(n) || res.SHA256 != hexString(sum[:]) || !strings.HasPrefix(res.Link, "AF_XDP") || !strings.HasPrefix(res.Peer, "AF_XDP") {
			t.Errorf("send %d bytes: result %+v", n, res)
		}
		if got, err := os.ReadFile(filepath.Join(s.dir, name)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, n)
		}
		back := filepath.Join(backDir, name)
		capGet := filepath.Join(srcDir, name+".get.pcapng")
		r = runCmd(t, clientCmd(topo, "get", "--capture", capGet, host, name, backDir))
		if r.code != 0 {
			t.Fatalf("get %d bytes: exit %d: %s", n, r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, hexString(sum[:])+" verified") || !strings.Contains(r.stdout, "by RDMA WRITE WITH IMMEDIATE (lmrm) over AF_XDP") {
			t.Errorf("get output: %q", r.stdout)
		}
		if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("fetched %d bytes (%v), want %d byte-exact", len(got), err, n)
		}
		if n > 0 && n <= 1<<20 {
			for _, c := range []string{capSend, capGet} {
				// Both go on an lmrm pool: the client's capture holds the
				// LMRM_ALLOC (send) or the answer to it (get).
				if v := runBinary(t, "dump", "--verify", c); v.code != 0 || strings.Count(v.stdout, "\n") < 2 || !strings.Contains(v.stdout, "[LMRM_ALLOC") {
					t.Errorf("dump --verify %s: exit %d, %d lines: %s%s", c, v.code, strings.Count(v.stdout, "\n"), v.stdout, v.stderr)
				}
			}
		}
		os.Remove(capSend)
		os.Remove(capGet)
		os.Remove(back)
	}
	noPartial(t, s.dir, "")
	noPartial(t, backDir, "")
	s.stop(t)
	for _, want := range []string{"received file0: 0 bytes", "received file3:", "sent file2:"} {
		if !strings.Contains(s.out.String(), want) {
			t.Errorf("server output lacks %q:\n%s", want, s.out.String())
		}
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestPrivilegedTransferFailures: an unreachable host, a missing file on the
// server, a server killed in the middle of a send and of a get, and a client
// killed in the middle of a send: one error line, non-zero exit, no partial
// file under the final name, and the server survives its clients.
func TestPrivilegedTransferFailures(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	work := t.TempDir()
	big := filepath.Join(work, "big")
	writeFile(t, big, 100<<20, 7)

	// Nobody listens on .99 (no ARP answer) nor on the peer before serve runs.
	start := time.Now()
	r := runCmd(t, clientCmd(topo, "send", "--connect-timeout", "1s", "198.51.100.99", big))
	oneErrorLine(t, "unreachable host", r, 1, "connect to 198.51.100.99:18515")
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("unreachable host took %v", d)
	}
	r = runCmd(t, clientCmd(topo, "get", "--connect-timeout", "500ms", topo.A.IPv4.String(), "big", work))
	oneErrorLine(t, "no server", r, 1, "connection refused")
	noPartial(t, work, "")

	s := startServer(t, topo)
	host := topo.A.IPv4.String()
	r = runCmd(t, clientCmd(topo, "get", host, "nothere", work))
	oneErrorLine(t, "missing file on the server", r, 1, `no file "nothere"`)
	noPartial(t, work, "nothere")

	// The client dies in the middle of a send: the server drops the
	// temporary file and keeps serving.
	c := clientCmd(topo, "send", host, big, "--name", "victim")
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

	// Still serving: a small send works.
	small := filepath.Join(work, "small")
	writeFile(t, small, 1000, 3)
	if r := runCmd(t, clientCmd(topo, "send", host, small)); r.code != 0 {
		t.Fatalf("send after a killed client: exit %d: %s", r.code, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "big"), mustRead(t, big), 0o644); err != nil {
		t.Fatal(err)
	}

	// The server dies in the middle of a get: the client fails with one
	// line and leaves nothing.
	getDir := t.TempDir()
	c = clientCmd(topo, "get", host, "big", getDir)
	var cerr bytes.Buffer
	c.Stderr = &cerr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitPart(t, getDir)
	s.kill()
	err := c.Wait()
	oneErrorLine(t, "server killed during get", result{stderr: cerr.String(), code: exitCode(err)}, 1, "get big")
	noPartial(t, getDir, "big")

	// The server dies in the middle of a send.
	s = startServer(t, topo)
	c = clientCmd(topo, "send", host, big, "--name", "big2")
	cerr.Reset()
	c.Stderr = &cerr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitPart(t, s.dir)
	s.kill()
	err = c.Wait()
	oneErrorLine(t, "server killed during send", result{stderr: cerr.String(), code: exitCode(err)}, 1, "send "+big)
	// The killed server could not remove its temporary file, but nothing
	// appears under the final name.
	if _, err := os.Stat(filepath.Join(s.dir, "big2")); !os.IsNotExist(err) {
		t.Errorf("big2 exists after the server died: %v", err)
	}
	if !hasPart(s.dir) {
		t.Fatalf("the killed server left no temporary file in %s", s.dir)
	}
	// A new server on the same directory removes it at start-up and says so.
	s = startServerIn(t, topo, s.dir)
	waitOutput(t, &s.errb, "serving on")
	if !strings.Contains(s.errb.String(), ".big2.xdproce-") || !strings.Contains(s.errb.String(), "receiver died") {
		t.Errorf("serve start-up did not report the stale temporary file: %q", s.errb.String())
	}
	noPartial(t, s.dir, "big2")
}

// waitOutput waits until b holds want.
func waitOutput(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in %q", want, b.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func hasPart(dir string) bool {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".part") {
			return true
		}
	}
	return false
}

// waitPart waits until a temporary transfer file appears in dir.
func waitPart(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !hasPart(dir) {
		if time.Now().After(deadline) {
			t.Fatalf("no transfer started in %s", dir)
		}
		time.Sleep(time.Millisecond)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPrivilegedTLS: serve --tls prints the fingerprint of its generated
// certificate; a client pinning it transfers, one pinning another is refused
// with one error line.
func TestPrivilegedTLS(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	srvCap := filepath.Join(t.TempDir(), "serve.pcapng")
	tlsDir := filepath.Join(t.TempDir(), "conf")
	s := startServer(t, topo, "--tls", "--tls-dir", tlsDir, "--capture", srvCap)
	host := topo.A.IPv4.String()
	fp := fingerprintOf(t, s)
	if !strings.Contains(s.errb.String(), "new, kept in "+tlsDir) {
		t.Errorf("serve did not say where it keeps its new certificate: %q", s.errb.String())
	}
	src := filepath.Join(t.TempDir(), "secret")
	data := writeFile(t, src, 300<<10, 5)
	if r := runCmd(t, clientCmd(topo, "send", "--tls-fingerprint", fp, host, src)); r.code != 0 {
		t.Fatalf("send over TLS: exit %d: %s", r.code, r.stderr)
	}
	if got, err := os.ReadFile(filepath.Join(s.dir, "secret")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v)", len(got), err)
	}
	wrong := strings.Repeat("0", 64)
	r := runCmd(t, clientCmd(topo, "send", "--tls-fingerprint", wrong, host, src, "--name", "other"))
	oneErrorLine(t, "wrong fingerprint", r, 1, "fingerprint")
	r = runCmd(t, clientCmd(topo, "send", host, src, "--name", "plain"))
	oneErrorLine(t, "plain client of a TLS server", r, 1, "server requires TLS (--tls-fingerprint "+fp+")")
	noPartial(t, s.dir, "other")
	noPartial(t, s.dir, "plain")
	// serve writes its capture when it stops.
	s.stop(t)
	if !strings.Contains(s.errb.String(), "capture written to "+srvCap) {
		t.Errorf("serve did not say where the capture went: %q", s.errb.String())
	}
	if v := runBinary(t, "dump", "--verify", srvCap); v.code != 0 || strings.Count(v.stdout, "\n") < 75 {
		t.Errorf("dump --verify %s: exit %d, %d lines: %s", srvCap, v.code, strings.Count(v.stdout, "\n"), v.stderr)
	}
	// A restart keeps the certificate: the same fingerprint, and the pinned
	// client still gets in.
	s = startServerIn(t, topo, s.dir, "--tls", "--tls-dir", tlsDir)
	if again := fingerprintOf(t, s); again != fp {
		t.Errorf("fingerprint after a restart %s, before %s", again, fp)
	}
	if r := runCmd(t, clientCmd(topo, "send", "--tls-fingerprint", fp, host, src, "--name", "again")); r.code != 0 {
		t.Errorf("pinned send after a restart: exit %d: %s", r.code, r.stderr)
	}
}

// fingerprintOf waits for the TLS fingerprint serve prints and returns it.
func fingerprintOf(t *testing.T, s *server) string {
	t.Helper()
	waitOutput(t, &s.errb, "--tls-fingerprint ")
	_, after, _ := strings.Cut(s.errb.String(), "--tls-fingerprint ")
	if len(after) < 64 {
		t.Fatalf("no fingerprint printed: %q", s.errb.String())
	}
	return after[:64]
}
