package tlsproxy

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/cm/ktls"
	"github.com/xdproce/xdproce/internal/testenv"
)

const helperDialEnv = "XDPROCE_TLSPROXY_HELPER_DIAL"

// TestHelperDial is not a test: run by TestPrivilegedPeerCredentials as another user, it
// dials the socket in helperDialEnv and waits for the proxy to hang up.
func TestHelperDial(t *testing.T) {
	path := os.Getenv(helperDialEnv)
	if path == "" {
		t.Skip("helper for TestPrivilegedPeerCredentials")
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	ktls.WriteFrame(c, ktls.FrameHello, []byte(`{"role":"server"}`))
	io.Copy(io.Discard, c)
}

// The proxy serves only its own user and root: a process of another user that reaches the
// socket (here made world-writable on purpose) is refused before any handshake.
func TestPrivilegedPeerCredentials(t *testing.T) {
	testenv.Privileged(t)
	dir, err := os.MkdirTemp("", "xdproce-peercred-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	exe := filepath.Join(dir, "helper")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "open.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o666)
	cmd := exec.Command(exe, "-test.run=^TestHelperDial$")
	cmd.Env = append(os.Environ(), helperDialEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	ln.SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln.AcceptUnix()
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	cert, err := cm.SelfSigned("xdproce")
	if err != nil {
		t.Fatal(err)
	}
	err = New(&cert, 5*time.Second, nil).Handle(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "uid 65534") || !strings.Contains(err.Error(), "only uid 0 or root") {
		t.Fatalf("Handle for uid 65534: %v", err)
	}
}
