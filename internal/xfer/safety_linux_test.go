package xfer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/testenv"
)

// TestPrivilegedFullDisk: the served directory is a 1 MiB tmpfs; a 4 MiB
// put is refused before any data moves, and the client's error carries the
// server's reason.
func TestPrivilegedFullDisk(t *testing.T) {
	testenv.Privileged(t)
	if raceEnabled {
		t.Skip("see race_on_test.go")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	a, b := loopDevices(t)
	r := newRigServer(t, a, &Server{Dev: b, Dir: dir}, &cm.Config{Insecure: true})
	data := randomBytes(4<<20, 5)
	for _, o := range []*Options{nil, {Enlarge: DefaultEnlargeConfig()}} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		_, err := Send(ctx, r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "big", o)
		cancel()
		var re *RemoteError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), `not enough space on the server: "big" needs 4194304 bytes`) {
			t.Errorf("send to a full disk: %v", err)
		}
		<-r.srvErr
	}
	// Two puts that each fit but not together: whether one is refused up
	// front (free space) or they run out of space while writing (ENOSPC),
	// each client that fails gets the server's reason, not a transport
	// error.
	half := randomBytes(700<<10, 7)
	errs := make(chan error, 2)
	for _, name := range []string{"h1", "h2"} {
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			_, err := Send(ctx, r.client, r.dial(t), bytes.NewReader(half), int64(len(half)), name, &Options{SlotSize: 64 << 10, Slots: 2})
			errs <- err
		}()
	}
	var failed int
	for range 2 {
		err := <-errs
		<-r.srvErr
		if err == nil {
			continue
		}
		failed++
		var re *RemoteError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "not enough space on the server") && !strings.Contains(err.Error(), "no space left on device") {
			t.Errorf("put that ran out of space: %v", err)
		}
	}
	if failed == 0 {
		t.Error("two 700 KiB puts into 1 MiB both succeeded")
	}
	os.Remove(filepath.Join(dir, "h1"))
	os.Remove(filepath.Join(dir, "h2"))
	// A file that fits still goes.
	small := randomBytes(100<<10, 6)
	if _, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(small), int64(len(small)), "small", nil); err != nil {
		t.Fatalf("send of a file that fits: %v", err)
	}
	<-r.srvErr
	assertNoTemp(t, dir)
}
