package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/stat"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

func TestStatUsageErrors(t *testing.T) {
	t.Setenv(stat.EnvDir, t.TempDir())
	for _, args := range [][]string{{"stat", "abc"}, {"stat", "0"}, {"stat", "1", "2"}, {"stat", "--dev", "eth0", "42"},
		{"stat", "--watch", "1ms"}, {"stat", "--watch", "-1s"}} {
		if _, _, err := run(t, args...); ExitCode(err) != 2 {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	_, _, err := run(t, "stat")
	if ExitCode(err) != 1 || !strings.Contains(err.Error(), "no running xdproce process") {
		t.Errorf("stat without processes: %v", err)
	}
}

// TestStatWatch: stat --watch over a device of this process prints a block
// per interval, the later ones with rates, until its context ends.
func TestStatWatch(t *testing.T) {
	t.Setenv(stat.EnvDir, t.TempDir())
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lb.Close()
	dev, err := roce.NewDevice(la, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	srv, err := stat.Listen(dev, "pipe0", "test")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var o, e strings.Builder
	if err := Run(ctx, []string{"stat", "--watch", "100ms", "--dev", "pipe0"}, &o, &e); err != nil {
		t.Fatalf("stat --watch: %v: %s", err, e.String())
	}
	out := o.String()
	blocks := strings.Count(out, fmt.Sprintf("PID %d (test) pipe0", os.Getpid()))
	if blocks < 2 || !strings.Contains(out, "engine_rounds") || !strings.Contains(out, "/s") {
		t.Errorf("%d blocks, want 2 or more with rates:\n%s", blocks, out)
	}
}

// TestStatSelect: --dev prefers the sockets in stat's own network namespace
// and falls back to the others; a PID selects its sockets.
func TestStatSelect(t *testing.T) {
	dir := t.TempDir()
	ns, err := stat.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	listen := func(netns uint64, ifname string) string {
		p := filepath.Join(dir, fmt.Sprintf("%d.%d.%s.sock", os.Getpid(), netns, ifname))
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return p
	}
	here, there, other := listen(ns, "eth9"), listen(ns+1, "eth9"), listen(ns+1, "eth8")
	paths := func(es []stat.Entry) []string {
		var ps []string
		for _, e := range es {
			ps = append(ps, e.Path)
		}
		return ps
	}
	if es, err := selectStat(dir, 0, "eth9"); err != nil || len(es) != 1 || es[0].Path != here {
		t.Errorf("--dev eth9: %v, %v; want only %s", paths(es), err, here)
	}
	if es, err := selectStat(dir, 0, "eth8"); err != nil || len(es) != 1 || es[0].Path != other {
		t.Errorf("--dev eth8: %v, %v; want %s from the other namespace", paths(es), err, other)
	}
	if es, err := selectStat(dir, os.Getpid(), ""); err != nil || len(es) != 3 {
		t.Errorf("by PID: %v, %v; want all three", paths(es), err)
	}
	if _, err := selectStat(dir, 0, "eth7"); err == nil || !strings.Contains(err.Error(), "eth7") {
		t.Errorf("--dev eth7: %v", err)
	}
	if _, err := selectStat(dir, os.Getpid()+1<<22, ""); err == nil || !strings.Contains(err.Error(), "no stat socket") {
		t.Errorf("unknown PID: %v", err)
	}
	_ = there
}
