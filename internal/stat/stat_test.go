package stat

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// fakeSource counts its snapshots.
type fakeSource struct{ n uint64 }

func (f *fakeSource) Snapshot(perQP bool) *roce.Snapshot {
	f.n++
	s := &roce.Snapshot{Device: "eth9", Link: "pipe", Counters: roce.Counters{{Name: "sent_pkts", Value: f.n}}}
	if perQP {
		s.PerQP = []roce.QPSnapshot{{QPN: 0x11, Type: "RC", State: "RTS"}}
	}
	return s
}

func TestListenQuery(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	src := &fakeSource{}
	s, err := Listen(src, "eth9.100", "serve")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v, mode %v; want a socket with mode 0600", s.Path(), err, fi.Mode())
	}
	es, err := List(dir)
	if err != nil || len(es) != 1 {
		t.Fatalf("List: %v, %v", es, err)
	}
	ns, _ := NetNS()
	if e := es[0]; e.PID != os.Getpid() || e.NetNS != ns || e.Device != "eth9.100" || e.Path != s.Path() {
		t.Errorf("entry %+v: want PID %d, netns %d, eth9.100", e, os.Getpid(), ns)
	}
	for i, perQP := range []bool{false, true} {
		r, err := Query(s.Path(), perQP, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := r.Counters.Get("sent_pkts"); v != uint64(i+1) || r.PID != os.Getpid() || r.Command != "serve" || r.NetNS != ns {
			t.Errorf("reply %+v", r)
		}
		if (len(r.PerQP) == 1) != perQP {
			t.Errorf("per-QP counters %v with perQP %v", r.PerQP, perQP)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Errorf("socket after Close: %v", err)
	}
}

// Sockets left behind: one of a process that is gone (List removes it),
// one of a live PID that nobody listens on (Query removes it).
func TestStaleSockets(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, socketName(child.Process.Pid, 1, "eth0"))
	orphan := filepath.Join(dir, socketName(os.Getpid(), 1, "eth1"))
	for _, p := range []string{dead, orphan} {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close()
	}
	os.WriteFile(filepath.Join(dir, "README"), nil, 0o600) // not a socket: ignored
	es, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Path != orphan {
		t.Fatalf("List = %+v, want only %s", es, orphan)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("socket of the dead PID still there: %v", err)
	}
	if _, err := Query(orphan, false, time.Second); !errors.Is(err, ErrStale) {
		t.Errorf("Query of a socket nobody listens on: %v, want ErrStale", err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("stale socket still there: %v", err)
	}
	if es, err := List(filepath.Join(dir, "missing")); err != nil || len(es) != 0 {
		t.Errorf("List of a missing directory: %v, %v", es, err)
	}
}

func TestParseName(t *testing.T) {
	for name, want := range map[string]*Entry{
		"42.4026531840.eth0.sock":     {PID: 42, NetNS: 4026531840, Device: "eth0"},
		"42.7.eth0.100.sock":          {PID: 42, NetNS: 7, Device: "eth0.100"},
		"42.7..sock":                  nil,
		"x.7.eth0.sock":               nil,
		"42.eth0.sock":                nil,
		"42.4026531840.eth0.sock.tmp": nil,
	} {
		e, ok := parseName(name)
		if ok != (want != nil) || ok && e != *want {
			t.Errorf("parseName(%q) = %+v, %v; want %+v", name, e, ok, want)
		}
	}
}

func TestDir(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		euid int
		env  func(string) string
		want string
	}{
		{0, env(), "/run/xdproce"},
		{0, env("XDG_RUNTIME_DIR", "/run/user/0"), "/run/xdproce"},
		{1000, env("XDG_RUNTIME_DIR", "/run/user/1000"), "/run/user/1000/xdproce"},
		{1000, env(EnvDir, "/tmp/x", "XDG_RUNTIME_DIR", "/run/user/1000"), "/tmp/x"},
		{0, env(EnvDir, "/tmp/x"), "/tmp/x"},
	} {
		if got, err := dirFor(c.euid, c.env); err != nil || got != c.want {
			t.Errorf("uid %d: %q, %v; want %q", c.euid, got, err, c.want)
		}
	}
	if _, err := dirFor(1000, env()); err == nil || !strings.Contains(err.Error(), "XDG_RUNTIME_DIR") {
		t.Errorf("no XDG_RUNTIME_DIR: error %v, want one naming it", err)
	}
}
