package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
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

// daemonProc is 'xdproce daemon' running in a lab namespace.
type daemonProc struct {
	cmd       *exec.Cmd
	sock      string
	out, errb syncBuffer
	done      chan error
}

// startDaemon starts the daemon on ifname in ns with its socket at sock and
// waits until it serves.
func startDaemon(t *testing.T, ns *netlab.NS, ifname, sock string, extra ...string) *daemonProc {
	t.Helper()
	d := &daemonProc{sock: sock, done: make(chan error, 1)}
	d.cmd = ns.Command(context.Background(), binary, append([]string{"daemon", "--dev", ifname, "--socket", sock,
		"--log-level", "info"}, extra...)...)
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.errb
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Signal(os.Interrupt)
		select {
		case <-d.done:
		case <-time.After(5 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(d.out.String(), "daemon: serving") {
		select {
		case err := <-d.done:
			t.Fatalf("daemon exited: %v: %s", err, d.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not serving after 20 s: %s", d.errb.String())
		}
	}
	return d
}

// vethBytes is the interface's rx+tx byte count in ns.
func vethBytes(t *testing.T, ns *netlab.NS, ifname string) int64 {
	t.Helper()
	var sum int64
	for _, f := range []string{"rx_bytes", "tx_bytes"} {
		out, err := ns.Command(t.Context(), "cat", "/sys/class/net/"+ifname+"/statistics/"+f).Output()
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += n
	}
	return sum
}

type sendResult struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Link   string `json:"link"`
	Peer   string `json:"peer_link"`
}

// TestPrivilegedDaemon: a daemon holds interface A by AF_XDP; serve there
// (--link auto) attaches to it. A file sent from the other namespace over
// AF_XDP lands byte-exact through the daemon; a 64 MiB file sent by a
// second local process (also attached) lands byte-exact by RDMA WRITE and
// comes back by RDMA READ with the veth's byte counters still (the daemon
// switched every frame port to port); a process asking for AF_XDP itself is
// told the daemon holds the interface. Then the daemon is SIGKILLed: serve
// fails within 2 s and no XDP program stays attached.
func TestPrivilegedDaemon(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	d := startDaemon(t, topo.A.NS, topo.A.Name, filepath.Join(t.TempDir(), "d.sock"), "--link", "xsk")
	dir := t.TempDir()
	s := &server{dir: dir, done: make(chan error, 1)}
	s.cmd = topo.A.NS.Command(context.Background(), binary, "serve", "--dev", topo.A.Name, "--dir", dir, "--insecure", "--log-level", "info")
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.errb
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	host := topo.A.IPv4.String()
	src := t.TempDir()

	// From the other namespace, over the wire.
	data := writeFile(t, filepath.Join(src, "wire"), 8<<20, 1)
	r := runCmd(t, clientCmd(topo, "send", "--json", host, filepath.Join(src, "wire")))
	if r.code != 0 {
		t.Fatalf("send from B: exit %d: %s\nserver: %s\ndaemon: %s", r.code, r.stderr, s.errb.String(), d.errb.String())
	}
	var res sendResult
	json.Unmarshal([]byte(r.stdout), &res)
	if sum := sha256.Sum256(data); res.SHA256 != hexString(sum[:]) || !strings.HasPrefix(res.Peer, "daemon (AF_XDP") {
		t.Errorf("send from B: %+v", res)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "wire")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, len(data))
	}
	if !strings.Contains(s.errb.String(), "attached to "+d.sock) {
		t.Errorf("serve did not say it attached to the daemon: %s", s.errb.String())
	}

	// Two local clients: no frame on the veth.
	data = writeFile(t, filepath.Join(src, "local"), 64<<20, 2)
	sum := sha256.Sum256(data)
	before := vethBytes(t, topo.A.NS, topo.A.Name)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r = runCmd(t, topo.A.NS.Command(ctx, binary, "send", "--json", "--dev", topo.A.Name, host, filepath.Join(src, "local")))
	if r.code != 0 {
		t.Fatalf("local send: exit %d: %s\ndaemon: %s", r.code, r.stderr, d.errb.String())
	}
	json.Unmarshal([]byte(r.stdout), &res)
	if res.SHA256 != hexString(sum[:]) || !strings.HasPrefix(res.Link, "daemon (") {
		t.Errorf("local send: %+v", res)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "local")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, len(data))
	}
	back := t.TempDir()
	r = runCmd(t, topo.A.NS.Command(ctx, binary, "get", "--dev", topo.A.Name, host, "local", back))
	if r.code != 0 || !strings.Contains(r.stdout, hexString(sum[:])+" verified") {
		t.Fatalf("local get: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if got, err := os.ReadFile(filepath.Join(back, "local")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("fetched %d bytes (%v), want %d byte-exact", len(got), err, len(data))
	}
	if moved := vethBytes(t, topo.A.NS, topo.A.Name) - before; moved > 64<<10 {
		t.Errorf("the veth moved %d bytes while two local clients moved 2 × 64 MiB", moved)
	} else {
		t.Logf("veth bytes during 2 × 64 MiB between local clients: %d", moved)
	}

	// AF_XDP asked for on the daemon's interface: held by the daemon.
	r = runCmd(t, topo.A.NS.Command(ctx, binary, "send", "--dev", topo.A.Name, "--link", "xsk", host, filepath.Join(src, "wire")))
	if r.code != 1 || !strings.Contains(r.stderr, "for the xdproce daemon (PID "+strconv.Itoa(d.cmd.Process.Pid)) {
		t.Errorf("send --link xsk on the daemon's interface: exit %d: %s", r.code, r.stderr)
	}

	// The daemon killed: serve's device fails at once; nothing stays attached.
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	d.done <- nil
	killed := time.Now()
	writeFile(t, filepath.Join(src, "after"), 1<<20, 3)
	r = runCmd(t, clientCmd(topo, "send", host, filepath.Join(src, "after")))
	el := time.Since(killed)
	if r.code == 0 || !strings.Contains(r.stderr+s.errb.String(), "link is gone") || el > 2*time.Second {
		t.Errorf("send to serve %v after its daemon's SIGKILL: exit %d: %s\nserve: %s", el.Round(time.Millisecond), r.code, r.stderr, s.errb.String())
	}
	out, _ := topo.A.NS.Command(t.Context(), "ip", "link", "show", topo.A.Name).Output()
	if strings.Contains(string(out), "xdp") {
		t.Errorf("an XDP program stays attached after the daemon's SIGKILL: %s", out)
	}
	t.Logf("after the daemon's SIGKILL: send: %s", strings.TrimSpace(r.stderr))
}
