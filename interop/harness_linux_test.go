package interop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/testenv"
	"golang.org/x/sys/unix"
)

// Environment of the suite.
const (
	envEnable  = "XDPROCE_INTEROP"         // 1: run (building the image if needed); 0: never
	envState   = "XDPROCE_INTEROP_STATE"   // a guest.sh state directory: use that running guest
	envCache   = "XDPROCE_INTEROP_CACHE"   // image cache (default /var/cache/xdproce-interop)
	envBin     = "XDPROCE_INTEROP_BIN"     // the xdproce binary (default: built from ./cmd/xdproce)
	envMatrix  = "XDPROCE_INTEROP_MATRIX"  // also write the matrix to this file
	envXDPMode = "XDPROCE_INTEROP_XDPMODE" // XDP attach mode on the tap: "" (native, else generic), native, generic
)

func cacheDir() string {
	if d := os.Getenv(envCache); d != "" {
		return d
	}
	return "/var/cache/xdproce-interop"
}

// guest is the running rxe peer, as guest.sh's STATE/env describes it.
type guest struct {
	state, share         string
	netns, tap           string
	hostIP, guestIP, mac string
	gidIndex             int
	qemuPID              int
	// IPv6 on the tap's two ends (guest.sh --host-ip6/--guest-ip6) and rxe0's GID index of
	// guestIP6; empty and -1 when the guest has none.
	hostIP6, guestIP6 string
	gid6Index         int
}

var suite struct {
	decide  sync.Once // sets skip
	once    sync.Once // boots or attaches
	g       *guest
	skip    string // why interop tests skip
	err     error  // boot failure: interop tests fail with it
	booted  bool   // this process booted the guest and takes it down
	tmp     string
	reboots int // guests rebooted because the path to them died
	// wedges undone by restarting the guest's virtio-net TX queue (QMP stop/cont)
	unwedged int
}

// suiteEnabled skips t unless the suite is to run here (root, and an image or a guest to use).
func suiteEnabled(t *testing.T) {
	t.Helper()
	testenv.Privileged(t)
	suite.decide.Do(decideSuite)
	if suite.skip != "" {
		// Not testenv.Skipf: a cold cache is a reason to skip even under XDPROCE_REQUIRE_PRIV=1
		// (CI runs this suite only when the image is cached).
		t.Skip(suite.skip)
	}
}

// needGuest returns the guest, booting it on first use, or skips/fails t. When the IP path
// between the namespace and the guest is dead (the tap has been seen to wedge: QEMU stops
// taking the guest's frames off its virtio-net TX queue; qmp_linux_test.go), it restarts that
// queue (QMP stop/cont), or reboots the guest when that does not bring the path back.
func needGuest(t *testing.T) *guest {
	t.Helper()
	suiteEnabled(t)
	suite.once.Do(setupSuite)
	if suite.err != nil {
		t.Fatal(suite.err)
	}
	g := suite.g
	if !g.pathOK() {
		time.Sleep(2 * time.Second)
		if !g.pathOK() {
			t.Logf("interop: no IP path between namespace %s and the guest (tap wedged)", g.netns)
			if g.unwedge(t.Logf) {
				t.Logf("interop: QMP stop/cont restarted the guest's TX queue; the path is back")
				suite.unwedged++
				return g
			}
			t.Logf("interop: rebooting the guest")
			if err := g.reboot(); err != nil {
				t.Fatalf("interop: reboot of the guest: %v", err)
			}
			suite.reboots++
		}
	}
	return g
}

// pathOK reports whether the guest answers a TCP connection from the namespace (a refusal on
// the discard port is an answer) within two seconds.
func (g *guest) pathOK() bool {
	err := g.inNetns(func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(g.guestIP, "9"), 2*time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return err
	})
	return err == nil
}

// reboot powers the guest off and boots it again with the same state directory and
// namespace name (so run.sh's cleanup still finds it).
func (g *guest) reboot() error {
	if out, err := exec.Command("./guest.sh", "down", g.state).CombinedOutput(); err != nil {
		return fmt.Errorf("guest.sh down: %v\n%s", err, out)
	}
	cmd := exec.Command("./guest.sh", "up", "--cache", cacheDir(), "--state", g.state, "--netns", g.netns,
		"--watch", strconv.Itoa(os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if _, err := cmd.Output(); err != nil {
		return fmt.Errorf("guest.sh up: %v\n%s", err, stderr.String())
	}
	n, err := loadGuest(g.state)
	if err != nil {
		return err
	}
	*g = *n
	return nil
}

func imageCached() bool {
	return fileExists(filepath.Join(cacheDir(), "vmlinuz")) && fileExists(filepath.Join(cacheDir(), "initrd.img"))
}

func decideSuite() {
	en := os.Getenv(envEnable)
	switch {
	case os.Getenv(envState) != "":
	case en == "0":
		suite.skip = envEnable + "=0: interop suite turned off"
	case !imageCached() && en != "1":
		suite.skip = fmt.Sprintf("interop guest image not cached in %s: run `make interop` (builds it, ~4 min, then runs this suite), or set %s=1", cacheDir(), envEnable)
	}
}

func setupSuite() {
	here, _ := os.Getwd()
	if st := os.Getenv(envState); st != "" {
		suite.g, suite.err = loadGuest(st)
		return
	}
	if !imageCached() {
		cmd := exec.Command(filepath.Join(here, "build-image.sh"), cacheDir())
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			suite.err = fmt.Errorf("build-image.sh: %w", err)
			return
		}
	}
	tmp, err := os.MkdirTemp("", "xdproce-interop-")
	if err != nil {
		suite.err = err
		return
	}
	suite.tmp = tmp
	state := filepath.Join(tmp, "guest")
	cmd := exec.Command(filepath.Join(here, "guest.sh"), "up", "--cache", cacheDir(), "--state", state,
		"--netns", fmt.Sprintf("xdp-iop-%d", os.Getpid()), "--watch", strconv.Itoa(os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	if _, err := cmd.Output(); err != nil {
		suite.err = fmt.Errorf("guest.sh up: %w\n%s", err, stderr.String())
		return
	}
	suite.booted = true
	suite.g, suite.err = loadGuest(state)
	if suite.err == nil {
		fmt.Fprintf(os.Stderr, "interop: guest up in %v (netns %s, guest %s, GID index %d)\n",
			time.Since(t0).Round(100*time.Millisecond), suite.g.netns, suite.g.guestIP, suite.g.gidIndex)
	}
}

func teardownSuite() {
	if suite.booted && suite.g != nil {
		exec.Command("./guest.sh", "down", suite.g.state).Run()
		suite.booted = false
	}
	if suite.tmp != "" {
		os.RemoveAll(suite.tmp)
	}
	if xd.dir != "" {
		os.RemoveAll(xd.dir)
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		teardownSuite()
		fmt.Fprintf(os.Stderr, "interop: %v: guest and namespace removed\n", s)
		os.Exit(130)
	}()
	code := m.Run()
	teardownSuite()
	writeMatrix()
	os.Exit(code)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func loadGuest(state string) (*guest, error) {
	b, err := os.ReadFile(filepath.Join(state, "env"))
	if err != nil {
		return nil, fmt.Errorf("guest state %s: %w", state, err)
	}
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			kv[k] = v
		}
	}
	g := &guest{state: state, share: kv["SHARE"], netns: kv["NETNS"], tap: kv["TAP"], hostIP: kv["HOST_IP"],
		guestIP: kv["GUEST_IP"], mac: kv["GUEST_MAC"]}
	g.gidIndex, _ = strconv.Atoi(kv["GID_INDEX"])
	g.qemuPID, _ = strconv.Atoi(kv["QEMU_PID"])
	g.hostIP6, g.guestIP6, g.gid6Index = kv["HOST_IP6"], kv["GUEST_IP6"], -1
	if v, err := strconv.Atoi(kv["GID6_INDEX"]); err == nil && g.guestIP6 != "" {
		g.gid6Index = v
	}
	if g.share == "" || g.netns == "" || g.qemuPID == 0 || kv["GID_INDEX"] == "" {
		return nil, fmt.Errorf("guest state %s: incomplete env (%q)", state, b)
	}
	if !g.alive() {
		return nil, fmt.Errorf("guest state %s: QEMU (pid %d) is not running", state, g.qemuPID)
	}
	return g, nil
}

func (g *guest) alive() bool { return unix.Kill(g.qemuPID, 0) == nil }

// job is a command running in the guest (see guest-init: jobs/ID.sh, ID.out, ID.rc, ID.kill).
type job struct {
	g    *guest
	id   string
	cmd  string
	done bool
	out  string
	rc   int
}

var jobSeq struct {
	sync.Mutex
	n int
}

// start queues cmd (bash, cwd /xi in the guest; $XI_GID_INDEX is the RoCEv2 IPv4 GID index).
func (g *guest) start(t *testing.T, cmd string) *job {
	t.Helper()
	jobSeq.Lock()
	jobSeq.n++
	id := fmt.Sprintf("%d-%d-%d", os.Getpid(), time.Now().UnixNano(), jobSeq.n)
	jobSeq.Unlock()
	dir := filepath.Join(g.share, "jobs")
	tmp := filepath.Join(dir, "."+id+".tmp")
	if err := os.WriteFile(tmp, []byte(cmd+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, id+".sh")); err != nil {
		t.Fatal(err)
	}
	j := &job{g: g, id: id, cmd: cmd}
	t.Cleanup(func() {
		if !j.finished() {
			j.kill()
		}
	})
	return j
}

func (j *job) path(ext string) string { return filepath.Join(j.g.share, "jobs", j.id+ext) }

func (j *job) finished() bool { return j.done || fileExists(j.path(".rc")) }

// output is what the job wrote so far.
func (j *job) output() string { b, _ := os.ReadFile(j.path(".out")); return string(b) }

func (j *job) kill() { os.WriteFile(j.path(".kill"), nil, 0o644) }

// wait waits up to timeout for the job; on timeout it kills it and returns an error.
func (j *job) wait(timeout time.Duration) (string, int, error) {
	if j.done {
		return j.out, j.rc, nil
	}
	end := time.Now().Add(timeout)
	for !fileExists(j.path(".rc")) {
		if !j.g.alive() {
			return j.output(), -1, errors.New("the guest died (console: " + filepath.Join(j.g.state, "console.log") + ")")
		}
		if time.Now().After(end) {
			j.kill()
			for i := 0; i < 50 && !fileExists(j.path(".rc")); i++ {
				time.Sleep(100 * time.Millisecond)
			}
			return j.output(), -1, fmt.Errorf("guest command timed out after %v and was killed: %s", timeout, j.cmd)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(j.path(".rc"))
	j.rc, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	j.out, j.done = j.output(), true
	return j.out, j.rc, nil
}

// run runs cmd in the guest and returns its output; a non-zero exit fails t.
func (g *guest) run(t *testing.T, timeout time.Duration, cmd string) string {
	t.Helper()
	out, rc, err := g.start(t, cmd).wait(timeout)
	if err != nil || rc != 0 {
		t.Fatalf("guest: %s: rc %d %v\n%s", cmd, rc, err, out)
	}
	return out
}

// waitOutput waits until the job's output matches pred (or the job ends, or timeout).
func (j *job) waitOutput(timeout time.Duration, pred func(string) bool) (string, bool) {
	end := time.Now().Add(timeout)
	for {
		out := j.output()
		if pred(out) {
			return out, true
		}
		if j.finished() || time.Now().After(end) || !j.g.alive() {
			return out, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// guestListening waits until a TCP socket listens on port in the guest, or the server job
// ends first (its output then says why).
func (g *guest) guestListening(t *testing.T, server *job, port int, timeout time.Duration) {
	t.Helper()
	probe := g.start(t, fmt.Sprintf("for i in $(seq %d); do ss -Hltn 'sport = :%d' | grep -q . && exit 0; read -r -t 0.1 < /run/nap; done; exit 1", int(timeout/(100*time.Millisecond)), port))
	g.awaitProbe(t, server, probe, fmt.Sprintf("nothing listens on TCP %d after %v", port, timeout))
}

// awaitProbe waits for probe, a guest job that exits 0 once server is ready; it fails t with
// what (and the probe's and the server's output) when the probe gives up, and at once when
// the server exits first or the guest dies.
func (g *guest) awaitProbe(t *testing.T, server, probe *job, what string) {
	t.Helper()
	for {
		if probe.finished() {
			out, rc, _ := probe.wait(time.Second)
			if rc != 0 {
				t.Fatalf("guest: %s (probe: %s); server output:\n%s", what, strings.TrimSpace(out), server.output())
			}
			return
		}
		if server.finished() {
			out, rc, _ := server.wait(time.Second)
			t.Fatalf("guest server exited (rc %d) before listening:\n%s", rc, out)
		}
		if !g.alive() {
			t.Fatal("the guest died")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hostProc is a program running on the host side, in the guest's namespace.
type hostProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer // stdout and stderr
	stdout bytes.Buffer // stdout alone
	done   chan struct{}
	err    error
}

func (p *hostProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// stdoutWriter writes to both of p's buffers.
type stdoutWriter struct{ p *hostProc }

func (w stdoutWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	w.p.stdout.Write(b)
	return w.p.out.Write(b)
}

func (p *hostProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// stdoutText is what the program wrote to its standard output so far.
func (p *hostProc) stdoutText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

// hostStart runs args in the namespace (stdout and stderr together); t's cleanup kills it.
func (g *guest) hostStart(t *testing.T, args ...string) *hostProc {
	t.Helper()
	p := &hostProc{done: make(chan struct{})}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", g.netns}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = stdoutWriter{p}, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *hostProc) kill() {
	select {
	case <-p.done:
	default:
		unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
		<-p.done
	}
}

func (p *hostProc) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait returns the output and exit status; on timeout the process group is killed.
func (p *hostProc) wait(timeout time.Duration) (string, error) {
	select {
	case <-p.done:
		return p.output(), p.err
	case <-time.After(timeout):
		p.kill()
		return p.output(), fmt.Errorf("timed out after %v and killed", timeout)
	}
}

// hostListening waits until a TCP socket listens on port in the namespace.
func (g *guest) hostListening(t *testing.T, server *hostProc, port int, timeout time.Duration) {
	t.Helper()
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		out, _ := exec.Command("ip", "netns", "exec", g.netns, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		if len(bytes.TrimSpace(out)) > 0 {
			return
		}
		if server.finished() {
			t.Fatalf("host server exited before listening (%v):\n%s", server.err, server.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("host: nothing listens on TCP %d after %v; server output:\n%s", port, timeout, server.output())
}

// inNetns runs f on a thread in the guest's namespace (for Go code such as package cm). The
// thread is never unlocked, so the runtime discards it when f returns.
func (g *guest) inNetns(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+g.netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", g.netns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// The matrix: one row per run, printed at the end of the suite.
type row struct {
	tool, op, role, link string
	result               string // pass, FAIL, skip
	note                 string
}

var matrix struct {
	sync.Mutex
	rows []row
}

// record adds t's row when t ends: pass, FAIL or skip (with the skip reason as the note).
func record(t *testing.T, tool, op, role, link string, note *string) {
	recordIf(t, false, tool, op, role, link, note)
}

// recordIf is record, adding the row only when t skipped if onlySkip is set.
func recordIf(t *testing.T, onlySkip bool, tool, op, role, link string, note *string) {
	t.Cleanup(func() {
		if onlySkip && !t.Skipped() {
			return
		}
		r := row{tool: tool, op: op, role: role, link: link, result: "pass"}
		switch {
		case t.Failed():
			r.result = "FAIL"
		case t.Skipped():
			r.result = "skip"
		}
		if note != nil {
			r.note = *note
		}
		if r.result == "FAIL" && suite.g != nil && !suite.g.pathOK() {
			r.note += " [afterwards no IP path to the guest: tap wedged]"
		}
		matrix.Lock()
		matrix.rows = append(matrix.rows, r)
		matrix.Unlock()
	})
}

func writeMatrix() {
	matrix.Lock()
	rows := append([]row(nil), matrix.rows...)
	matrix.Unlock()
	if len(rows) == 0 {
		return
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.tool != b.tool {
			return a.tool < b.tool
		}
		if a.link != b.link {
			return a.link < b.link
		}
		if a.op != b.op {
			return a.op < b.op
		}
		return a.role < b.role
	})
	var b strings.Builder
	fmt.Fprintf(&b, "interop matrix (xdproce against Linux rxe; role = xdproce's role)\n")
	fmt.Fprintf(&b, "%-16s %-32s %-7s %-5s %-6s %s\n", "TOOL", "OPERATION", "ROLE", "LINK", "RESULT", "NOTE")
	counts := map[string]int{}
	for _, r := range rows {
		counts[r.result]++
		fmt.Fprintf(&b, "%-16s %-32s %-7s %-5s %-6s %s\n", r.tool, r.op, r.role, r.link, r.result, r.note)
	}
	fmt.Fprintf(&b, "%d pass, %d FAIL, %d skip", counts["pass"], counts["FAIL"], counts["skip"])
	if suite.unwedged > 0 {
		fmt.Fprintf(&b, "; the guest's TX queue was restarted %d times after its tap wedged", suite.unwedged)
	}
	if suite.reboots > 0 {
		fmt.Fprintf(&b, "; the guest was rebooted %d times after its tap wedged", suite.reboots)
	}
	b.WriteString("\n")
	if p := os.Getenv(envMatrix); p != "" {
		os.WriteFile(p, []byte(b.String()), 0o644)
		return
	}
	os.Stdout.WriteString("\n" + b.String())
}

// ctxFor is a context bounded by d, cancelled at the end of t.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
