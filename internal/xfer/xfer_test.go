package xfer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// loopDevices makes two devices over link/udp on 127.0.0.1 and 127.0.0.2.
func loopDevices(t *testing.T) (a, b *roce.Device) {
	t.Helper()
	a, b, err := LoopbackPair(20000+os.Getpid()%20000, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

type rig struct {
	client, server *roce.Device
	dir            string
	addr           string
	srvErr         chan error
}

func newRig(t *testing.T, opts *Options) *rig {
	t.Helper()
	if raceEnabled {
		t.Skip("the race detector cannot see ordering through kernel sockets (see race_on_test.go)")
	}
	a, b := loopDevices(t)
	return newRigOn(t, a, b, opts)
}

// newRigOn serves from device b; the client uses a.
func newRigOn(t *testing.T, a, b *roce.Device, opts *Options) *rig {
	t.Helper()
	return newRigServer(t, a, &Server{Dev: b, Dir: t.TempDir(), Options: opts}, &cm.Config{Insecure: true})
}

// newRigServer runs s (its Done is set here) behind a listener with cfg;
// the client uses a.
func newRigServer(t *testing.T, a *roce.Device, s *Server, cfg *cm.Config) *rig {
	t.Helper()
	return newRigServerAt(t, "127.0.0.2:0", a, s, cfg)
}

// newRigServerAt is newRigServer listening on addr.
func newRigServerAt(t *testing.T, addr string, a *roce.Device, s *Server, cfg *cm.Config) *rig {
	t.Helper()
	r := &rig{client: a, server: s.Dev, dir: s.Dir, srvErr: make(chan error, 16)}
	ln, err := cm.Listen(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	s.Done = func(op string, res Result, err error) { r.srvErr <- err }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *rig) dial(t *testing.T) *cm.Conn {
	t.Helper()
	c, err := cm.Dial(t.Context(), r.addr, &cm.Config{Retry: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	rng.Read(b)
	return b
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestSendGet: files of 0 B, 1 B, odd sizes around the slot size and several
// slots go by RDMA WRITE and come back by RDMA READ byte-exact, with
// matching SHA-256s on both sides and no temporary file left.
func TestSendGet(t *testing.T) {
	r := newRig(t, &Options{SlotSize: 64 << 10, Slots: 3})
	for i, n := range []int{0, 1, 4095, 64 << 10, 64<<10 + 1, 1 << 20, 3<<20 + 17} {
		data := randomBytes(n, uint64(i))
		name := "f" + string(rune('a'+i))
		res, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(n), name, &Options{SlotSize: 64 << 10, Slots: 3})
		if err != nil {
			t.Fatalf("send %d bytes: %v", n, err)
		}
		if err := <-r.srvErr; err != nil {
			t.Fatalf("server: %v", err)
		}
		if res.SHA256 != sum(data) || res.Size != int64(n) {
			t.Fatalf("send result %+v, want sha %s", res, sum(data))
		}
		got, err := os.ReadFile(filepath.Join(r.dir, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, n)
		}
		dst := filepath.Join(t.TempDir(), "copy")
		res, err = Get(t.Context(), r.client, r.dial(t), name, dst, nil)
		if err != nil {
			t.Fatalf("get %d bytes: %v", n, err)
		}
		if err := <-r.srvErr; err != nil {
			t.Fatalf("server: %v", err)
		}
		got, err = os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, data) || res.SHA256 != sum(data) {
			t.Fatalf("fetched %d bytes (%v), want %d byte-exact", len(got), err, n)
		}
		assertNoTemp(t, r.dir)
		assertNoTemp(t, filepath.Dir(dst))
	}
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".part") {
			t.Errorf("temporary file %s left in %s", e.Name(), dir)
		}
	}
}

// TestRefusals: bad names and missing files are refused with the server's
// reason, and nothing is written.
func TestRefusals(t *testing.T) {
	r := newRig(t, nil)
	dst := filepath.Join(t.TempDir(), "x")
	_, err := Get(t.Context(), r.client, r.dial(t), "missing", dst, nil)
	if err == nil || !strings.Contains(err.Error(), `no file "missing"`) {
		t.Fatalf("get of a missing file: %v", err)
	}
	<-r.srvErr
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("get of a missing file left %s: %v", dst, err)
	}
	assertNoTemp(t, filepath.Dir(dst))
	for _, name := range []string{"../x", "a/b", ".hidden", ""} {
		if _, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(nil), 0, name, nil); err == nil {
			t.Errorf("send as %q succeeded", name)
		}
	}
	// A client lying about the checksum: the server refuses and keeps nothing.
	c := newCtrl(t.Context(), r.dial(t))
	defer c.close()
	q, err := newQPConn(r.client, roce.RC, 4096, 1, 1, c.c.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	req := &message{Type: msgPut, Version: ProtocolVersion, Name: "lie", Size: 0}
	q.endpoint(req)
	c.send(req)
	var m message
	if err := c.expect(&m, msgAccept); err != nil {
		t.Fatal(err)
	}
	c.send(&message{Type: msgEnd, SHA256: strings.Repeat("0", 64)})
	if err := c.recv(&m); err != nil || m.Type != msgError || !strings.Contains(m.Error, "checksum mismatch") {
		t.Fatalf("after a wrong checksum: %+v, %v", m, err)
	}
	if err := <-r.srvErr; err == nil {
		t.Error("server reported success for a wrong checksum")
	}
	if _, err := os.Stat(filepath.Join(r.dir, "lie")); !os.IsNotExist(err) {
		t.Errorf("file stored despite a wrong checksum: %v", err)
	}
	assertNoTemp(t, r.dir)
}

// TestClientDiesMidTransfer: the client stops after announcing 1 MiB and
// sending part of it (by RDMA WRITE, and through an enlargement channel); the
// server drops the temporary file.
func TestClientDiesMidTransfer(t *testing.T) {
	r := newRig(t, &Options{SlotSize: 64 << 10, Slots: 2})
	for _, o := range []*Options{{SlotSize: 64 << 10, Slots: 2}, {Enlarge: DefaultEnlargeConfig()}} {
		ctx, cancel := context.WithCancel(t.Context())
		pr := &slowReader{r: bytes.NewReader(randomBytes(1<<20, 9)), after: 256 << 10, cancel: cancel}
		_, err := Send(ctx, r.client, r.dial(t), pr, 1<<20, "partial", o)
		if err == nil {
			t.Fatal("send succeeded after cancellation")
		}
		if err := <-r.srvErr; err == nil {
			t.Error("server reported success for a partial transfer")
		}
		if _, err := os.Stat(filepath.Join(r.dir, "partial")); !os.IsNotExist(err) {
			t.Errorf("partial file stored: %v", err)
		}
		assertNoTemp(t, r.dir)
	}
}

// slowReader cancels the transfer after some bytes.
type slowReader struct {
	r      *bytes.Reader
	n      int
	after  int
	cancel func()
}

func (s *slowReader) Read(b []byte) (int, error) {
	if s.n >= s.after {
		s.cancel()
		time.Sleep(50 * time.Millisecond)
	}
	n, err := s.r.Read(b)
	s.n += n
	return n, err
}

// TestServerBusy: beyond MaxConns, requests are refused with the reason.
func TestServerBusy(t *testing.T) {
	if raceEnabled {
		t.Skip("see race_on_test.go")
	}
	a, b := loopDevices(t)
	ln, err := cm.Listen("127.0.0.2:0", &cm.Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Dev: b, Dir: t.TempDir(), MaxConns: 1}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// The first connection sends nothing and holds the only place.
	idle, err := cm.Dial(t.Context(), ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(50 * time.Millisecond)
	c, err := cm.Dial(t.Context(), ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Send(t.Context(), a, c, bytes.NewReader([]byte("x")), 1, "x", nil)
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "server busy") {
		t.Fatalf("send to a full server: %v", err)
	}
}
