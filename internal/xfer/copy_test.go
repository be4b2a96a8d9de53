package xfer

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce"
)

// copyRig is a controller device on 127.0.0.1 and two servers, the source
// on 127.0.0.2 and the sink on 127.0.0.3, over link/udp.
func copyRig(t *testing.T) (c *roce.Device, src, dst *rig) {
	t.Helper()
	if raceEnabled {
		t.Skip("the race detector cannot see ordering through kernel sockets (see race_on_test.go)")
	}
	port := 20000 + os.Getpid()%20000
	a, b, err := LoopbackPair(port, nil)
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("127.0.0.3")
	l, err := udp.Open(udp.Config{Addr: ip, Port: port, MTU: 1500})
	if err != nil {
		a.Close()
		b.Close()
		t.Fatal(err)
	}
	d3, err := roce.NewDevice(boundedWait{l}, &roce.Options{Addrs: []netip.Addr{ip}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close(); d3.Close() })
	src = newRigServer(t, a, &Server{Dev: b, Dir: t.TempDir()}, &cm.Config{Insecure: true})
	dst = newRigServerAt(t, "127.0.0.3:0", a, &Server{Dev: d3, Dir: t.TempDir()}, &cm.Config{Insecure: true})
	return a, src, dst
}

// TestCopy: files of 0 B, 1 B, odd sizes and several operations go from the
// source's directory to the sink's byte-exact, through third-party READs:
// the controller's device receives only the completions (no data), the
// source's queue pair received none, and the SHA-256s agree.
func TestCopy(t *testing.T) {
	c, src, dst := copyRig(t)
	for i, n := range []int{0, 1, 4095, copyOp + 17, 3<<20 + 5} {
		data := randomBytes(n, uint64(i+1))
		name := "f" + string(rune('0'+i))
		if err := os.WriteFile(filepath.Join(src.dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		before := c.Stats()
		res, err := Copy(t.Context(), c, src.dial(t), dst.dial(t), name, name+".copy", nil)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		for _, r := range []*rig{src, dst} {
			if err := <-r.srvErr; err != nil {
				t.Fatalf("%d bytes: server: %v", n, err)
			}
		}
		got, err := os.ReadFile(filepath.Join(dst.dir, name+".copy"))
		if err != nil || !bytes.Equal(got, data) || res.SHA256 != sum(data) || res.Size != int64(n) {
			t.Fatalf("%d bytes: stored %d bytes (%v), equal %v, sha %s", n, len(got), err, bytes.Equal(got, data), res.SHA256)
		}
		after := c.Stats()
		if rx := after.RxBytes - before.RxBytes; rx > 4096+uint64(res.OOO.Delivered)*128 {
			t.Errorf("%d bytes: the controller received %d bytes for %d completions", n, rx, res.OOO.Delivered)
		}
		assertNoTemp(t, dst.dir)
		t.Logf("%d bytes: %+v", n, *res.OOO)
	}
}

// TestCopyRefused: a server whose hello lacks cm.CapOOO3P is not asked; a
// name the source lacks fails with its reason and stores nothing.
func TestCopyRefused(t *testing.T) {
	c, src, dst := copyRig(t)
	if _, err := Copy(t.Context(), c, src.dial(t), dst.dial(t), "absent", "x", nil); err == nil {
		t.Fatal("copied a file the source lacks")
	} else {
		t.Logf("absent: %v", err)
	}
	<-src.srvErr
	saved := cm.Capabilities
	cm.Capabilities = slices.DeleteFunc(slices.Clone(saved), func(c string) bool { return c == cm.CapOOO3P })
	t.Cleanup(func() { cm.Capabilities = saved })
	_, err := Copy(t.Context(), c, src.dial(t), dst.dial(t), "x", "x", nil)
	if err == nil || !strings.Contains(err.Error(), cm.CapOOO3P) {
		t.Fatalf("copy with servers lacking %q: %v", cm.CapOOO3P, err)
	}
	if _, err := os.Stat(filepath.Join(dst.dir, "x")); !os.IsNotExist(err) {
		t.Errorf("stored: %v", err)
	}
	// What `xdproce copy` does: require it in the hello, which fails with
	// one line.
	_, err = cm.Dial(t.Context(), src.addr, &cm.Config{Retry: time.Second, Require: []string{cm.CapOOO3P}})
	if !errors.Is(err, cm.ErrCapability) || !strings.Contains(err.Error(), `the server lacks "ooo-3p"`) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("hello requiring %q: %v", cm.CapOOO3P, err)
	}
}

// TestCopyCancelled: a controller that gives up mid-copy leaves nothing at
// the sink (no file, no temporary file), and both servers end the request.
func TestCopyCancelled(t *testing.T) {
	c, src, dst := copyRig(t)
	data := randomBytes(8<<20, 9)
	if err := os.WriteFile(filepath.Join(src.dir, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	o := &Options{Progress: func(done, total int64) {
		if done > 0 {
			cancel()
		}
	}}
	if _, err := Copy(ctx, c, src.dial(t), dst.dial(t), "big", "big", o); err == nil {
		t.Fatal("a cancelled copy succeeded")
	}
	for _, r := range []*rig{src, dst} {
		select {
		case err := <-r.srvErr:
			if err == nil {
				t.Error("a server finished a cancelled copy without an error")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a server still serves the cancelled copy")
		}
	}
	if _, err := os.Stat(filepath.Join(dst.dir, "big")); !os.IsNotExist(err) {
		t.Errorf("stored: %v", err)
	}
	assertNoTemp(t, dst.dir)
}
