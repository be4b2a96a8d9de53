package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/testenv"
)

// labNamespaces lists the network namespaces a demo process made.
func labNamespaces(t *testing.T, pid int) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	var found []string
	prefix := "xdl-" + strconv.Itoa(pid) + "-"
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, prefix) {
			found = append(found, strings.Fields(l)[0])
		}
	}
	return found
}

// TestPrivilegedDemo: the demo as root builds its lab, moves the data over
// AF_XDP, verifies it, reports link, throughput and capture, and leaves no
// namespace behind; the capture passes dump --verify.
func TestPrivilegedDemo(t *testing.T) {
	testenv.Privileged(t)
	capPath := filepath.Join(t.TempDir(), "demo.pcapng")
	cmd := exec.Command(binary, "demo", "--size", "8MiB", "--capture", capPath)
	r := runCmd(t, cmd)
	if r.code != 0 {
		t.Fatalf("demo: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"lab: namespaces xdl-", "verified", "link: AF_XDP (native)", "path MTU 4096", "throughput: ",
		"capture: " + capPath, "every ICRC good", "lab removed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	if ns := labNamespaces(t, cmd.Process.Pid); len(ns) != 0 {
		t.Errorf("namespaces left: %v", ns)
	}
	if v := runBinary(t, "dump", "--verify", capPath); v.code != 0 {
		t.Errorf("dump --verify: exit %d: %s", v.code, v.stderr)
	}
}

// TestPrivilegedDemoInterrupted: SIGINT while the lab exists ends the demo
// with one error line and exit 1, and the lab is gone.
func TestPrivilegedDemoInterrupted(t *testing.T) {
	testenv.Privileged(t)
	cmd, o, e, done := startDemoSending(t)
	if len(labNamespaces(t, cmd.Process.Pid)) == 0 {
		t.Fatalf("no lab namespaces while sending")
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		oneErrorLine(t, "interrupted demo", result{stderr: e.String(), code: exitCode(err)}, 1, "interrupted")
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("demo did not stop within 15 s of SIGINT:\n%s%s", o.String(), e.String())
	}
	if ns := labNamespaces(t, cmd.Process.Pid); len(ns) != 0 {
		t.Errorf("namespaces left after SIGINT: %v", ns)
	}
	if !strings.Contains(o.String(), "lab removed") {
		t.Errorf("output lacks 'lab removed':\n%s", o.String())
	}
}

// syncBuffer is read while a process writes to it.
type syncBuffer = testenv.Buffer

// demoLeftovers lists what a demo process with that pid could leave behind:
// its lab namespaces, its work directory and processes started with it.
func demoLeftovers(t *testing.T, pid int) []string {
	t.Helper()
	left := labNamespaces(t, pid)
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), demoDirPrefix(pid)+"*"))
	left = append(left, dirs...)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(demoDirPrefix(pid))) {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return left
}

// TestPrivilegedDemoHead: 'xdproce demo | head -n 1': stdout closes after the
// first line; the demo stops and leaves no namespace, directory or process.
func TestPrivilegedDemoHead(t *testing.T) {
	testenv.Privileged(t)
	tmp := t.TempDir() // the demo's TMPDIR: its work directory and per-run capture go here
	cmd := exec.Command(binary, "demo", "--size", "256MiB")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var e syncBuffer
	cmd.Stderr = &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	line := make([]byte, 0, 256)
	var b [1]byte
	for len(line) < 256 {
		if n, err := stdout.Read(b[:]); n == 0 || err != nil || b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	stdout.Close() // what head does after its line
	if !strings.HasPrefix(string(line), "lab: namespaces xdl-") {
		t.Errorf("first line %q, want the lab line", line)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("demo still running 30 s after its stdout closed:\n%s", e.String())
	}
	if left := demoLeftovers(t, cmd.Process.Pid); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	// The work directory and the per-run capture of a run that did not
	// finish are removed too.
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		for _, e := range left {
			t.Errorf("left in the demo's TMPDIR: %s", e.Name())
		}
	}
}

// TestPrivilegedDemoKilled: a demo killed outright (SIGKILL) takes its serve
// with it, and the next demo removes the lab and work directory it left.
func TestPrivilegedDemoKilled(t *testing.T) {
	testenv.Privileged(t)
	cmd, _, _, done := startDemoSending(t)
	cmd.Process.Kill()
	<-done
	pid := cmd.Process.Pid
	// The children die with it (SIGTERM from the kernel); give them a moment.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if len(demoLeftovers(t, pid)) == len(labNamespaces(t, pid))+1 { // the directory stays until the next demo
			break
		}
	}
	if len(labNamespaces(t, pid)) == 0 {
		t.Fatal("SIGKILL left no lab to reap: the test proves nothing")
	}
	capPath := filepath.Join(t.TempDir(), "next.pcapng")
	if r := runBinary(t, "demo", "--size", "1MiB", "--capture", capPath); r.code != 0 {
		t.Fatalf("next demo: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if left := demoLeftovers(t, pid); len(left) != 0 {
		t.Errorf("left behind by the killed demo after the next one: %v", left)
	}
}

// startDemoSending starts a 1 GiB demo without a capture and returns once it
// says it is sending (the lab exists); done receives its Wait's result.
func startDemoSending(t *testing.T) (cmd *exec.Cmd, o, e *syncBuffer, done chan error) {
	t.Helper()
	cmd = exec.Command(binary, "demo", "--size", "1GiB", "--capture", "")
	o, e = new(syncBuffer), new(syncBuffer)
	cmd.Stdout, cmd.Stderr = o, e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(o.String(), "sending") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("the demo never started sending:\n%s%s", o.String(), e.String())
		}
		select {
		case err := <-done:
			t.Fatalf("demo ended before it was stopped (%v):\n%s%s", err, o.String(), e.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return cmd, o, e, done
}
