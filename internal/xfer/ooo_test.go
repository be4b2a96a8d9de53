package xfer

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce/ooo"
)

// TestSendGetOOO: through a pipe that loses 2 %, reorders 30 % and
// duplicates 1 % of the frames each way, files of 0 B to several slots go
// by OOO WRITE and come back by OOO READ byte-exact with the SHA-256s
// agreeing; the results say OOO, carry the paths, and on the lossy pipe the
// retries and the transport's drops are counted.
func TestSendGetOOO(t *testing.T) {
	f := pipe.Faults{Loss: 0.02, Reorder: 0.3, Duplicate: 0.01}
	a, b := pipeDevicesWith(t, pipe.Config{Seed: 5, AtoB: f, BtoA: f})
	r := newRigOn(t, a, b, &Options{SlotSize: 256 << 10, Slots: 4})
	oo := &Options{SlotSize: 256 << 10, Slots: 4, OOO: &ooo.Config{Paths: 4, Timeout: 20 * time.Millisecond}}
	var retries, dups uint64
	for i, n := range []int{0, 1, 4095, 256 << 10, 3<<20 + 17} {
		data := randomBytes(n, uint64(i+40))
		name := "o" + string(rune('a'+i))
		res, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(n), name, oo)
		if err != nil {
			t.Fatalf("send %d bytes: %v", n, err)
		}
		if err := <-r.srvErr; err != nil {
			t.Fatalf("server: %v", err)
		}
		if res.SHA256 != sum(data) || res.Op != OpOOOWrite || res.OOO == nil || res.OOO.Paths != 4 || res.PathMTU != 4096 || !res.OOO.Commit {
			t.Fatalf("send result %+v (ooo %+v)", res, res.OOO)
		}
		got, err := os.ReadFile(filepath.Join(r.dir, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, n)
		}
		retries += res.OOO.Retries
		dst := filepath.Join(t.TempDir(), "copy")
		gres, err := Get(t.Context(), r.client, r.dial(t), name, dst, oo)
		if err != nil {
			t.Fatalf("get %d bytes: %v", n, err)
		}
		if err := <-r.srvErr; err != nil {
			t.Fatalf("server: %v", err)
		}
		got, err = os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, data) || gres.SHA256 != sum(data) || gres.Op != OpOOORead || gres.OOO == nil {
			t.Fatalf("fetched %d bytes (%v), want %d byte-exact; result %+v", len(got), err, n, gres)
		}
		retries += gres.OOO.Retries
		dups += gres.OOO.DupIndex
		assertNoTemp(t, r.dir)
		t.Logf("%d bytes: send %+v; get %+v", n, *res.OOO, *gres.OOO)
	}
	if retries == 0 || dups == 0 {
		t.Errorf("at 2 %% loss and 1 %% duplicates: %d retries, %d duplicate packets dropped (want some of each)", retries, dups)
	}
}

// TestOOORefused: a server whose hello lacks cm.CapOOO is not asked: Send
// and Get in OOO mode fail with one line saying so, and nothing is stored.
func TestOOORefused(t *testing.T) {
	a, b := pipeDevices(t)
	r := newRigOn(t, a, b, nil)
	saved := cm.Capabilities
	cm.Capabilities = slices.DeleteFunc(slices.Clone(saved), func(c string) bool { return c == cm.CapOOO })
	t.Cleanup(func() { cm.Capabilities = saved })
	oo := &Options{OOO: &ooo.Config{}}
	_, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader([]byte("x")), 1, "x", oo)
	if !errors.Is(err, errNoOOO) {
		t.Fatalf("send to a server without OOO mode: %v", err)
	}
	// The server saw no request (nothing reaches its Done).
	dst := filepath.Join(t.TempDir(), "x")
	if _, err = Get(t.Context(), r.client, r.dial(t), "x", dst, oo); !errors.Is(err, errNoOOO) {
		t.Fatalf("get from a server without OOO mode: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "x")); !os.IsNotExist(err) {
		t.Errorf("stored: %v", err)
	}
	if len(r.srvErr) != 0 {
		t.Errorf("the server served a request: %v", <-r.srvErr)
	}
	t.Logf("refused with: %v", err)
}
