package xfer

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/testenv"
)

// countingProxy relays TCP connections to target and counts the bytes each
// way: the control connection as the wire carries it.
type countingProxy struct {
	addr     string
	up, down atomic.Int64 // client → server, server → client
	wg       sync.WaitGroup
}

func newCountingProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go p.relay(c, target)
		}
	}()
	return p
}

func (p *countingProxy) relay(c net.Conn, target string) {
	defer p.wg.Done()
	defer c.Close()
	s, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{})
	go func() {
		n, _ := io.Copy(s, c)
		p.up.Add(n)
		s.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	n, _ := io.Copy(c, s)
	p.down.Add(n)
	c.(*net.TCPConn).CloseWrite()
	<-done
}

// bytes waits for the relayed connections to end and returns the bytes
// counted since the last call.
func (p *countingProxy) bytes() int64 {
	p.wg.Wait()
	return p.up.Swap(0) + p.down.Swap(0)
}

// TestLMRMControlBytes: a send and a get of one slot and of 256 slots put
// the same number of bytes on the TCP control connection, give or take the
// digits of the numbers (the data, the LMRM_ALLOC, its answer and the
// releases go on the queue pair); the files arrive byte-exact by OpLMRM.
// With a peer from before lmrm (cm.CapLMRM taken out of the hellos) both
// ends say so in one line, fall back to the slot protocol, and the same
// count grows by a control message per slot: the counter sees them.
func TestLMRMControlBytes(t *testing.T) {
	const slot = 16 << 10
	var srvLog, cliLog testenv.Buffer
	r := newRig(t, &Options{SlotSize: slot, Slots: 4, Log: slog.New(slog.NewTextHandler(&srvLog, nil))})
	p := newCountingProxy(t, r.addr)
	dial := func() *cm.Conn {
		c, err := cm.Dial(t.Context(), p.addr, &cm.Config{Retry: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	o := &Options{SlotSize: slot, Slots: 4, Log: slog.New(slog.NewTextHandler(&cliLog, nil))}
	// transfer sends n bytes and gets them back; it returns the control
	// bytes of each.
	transfer := func(n int, sendOp, getOp string) (send, get int64) {
		t.Helper()
		data := randomBytes(n, uint64(n))
		name := "c" + string(rune('a'+n%26))
		os.Remove(filepath.Join(r.dir, name))
		res, err := Send(t.Context(), r.client, dial(), bytes.NewReader(data), int64(n), name, o)
		if err != nil {
			t.Fatalf("send %d bytes: %v", n, err)
		}
		if err := <-r.srvErr; err != nil {
			t.Fatalf("server: %v", err)
		}
		send = p.bytes()
		dst := filepath.Join(t.TempDir(), "copy")
		gres, err := Get(t.Context(), r.client, dial(), name, dst, o)
		if err != nil {
			t.Fatalf("get %d bytes: %v", n, err)
		}
		if err := <-r.srvErr; err != nil {
			t.Fatalf("server: %v", err)
		}
		get = p.bytes()
		stored, _ := os.ReadFile(filepath.Join(r.dir, name))
		got, _ := os.ReadFile(dst)
		if !bytes.Equal(stored, data) || !bytes.Equal(got, data) || res.SHA256 != sum(data) || gres.SHA256 != sum(data) {
			t.Fatalf("%d bytes: stored %d, got back %d, not byte-exact", n, len(stored), len(got))
		}
		if res.Op != sendOp || gres.Op != getOp {
			t.Fatalf("%d bytes went by %q and came back by %q, want %q and %q", n, res.Op, gres.Op, sendOp, getOp)
		}
		return send, get
	}
	const many = 256 * slot
	s1, g1 := transfer(slot, OpLMRM, OpLMRM)
	sN, gN := transfer(many, OpLMRM, OpLMRM)
	t.Logf("lmrm: control bytes for 1 slot: send %d, get %d; for 256 slots: send %d, get %d", s1, g1, sN, gN)
	// Numbers in the messages (size, QPN, PSN) may differ in their digits.
	const slack = 48
	if sN > s1+slack || gN > g1+slack {
		t.Errorf("control bytes grow with the slots: send %d → %d, get %d → %d", s1, sN, g1, gN)
	}
	if strings.Contains(cliLog.String()+srvLog.String(), "slot protocol") {
		t.Errorf("a fallback notice between two ends with lmrm:\n%s%s", cliLog.String(), srvLog.String())
	}

	saved := cm.Capabilities
	cm.Capabilities = slices.DeleteFunc(slices.Clone(saved), func(c string) bool { return c == cm.CapLMRM })
	t.Cleanup(func() { cm.Capabilities = saved })
	o1, og1 := transfer(slot, "RDMA WRITE", "RDMA READ")
	oN, ogN := transfer(many, "RDMA WRITE", "RDMA READ")
	t.Logf("slot protocol: control bytes for 1 slot: send %d, get %d; for 256 slots: send %d, get %d", o1, og1, oN, ogN)
	if oN < o1+255*40 || ogN < og1+255*40 {
		t.Errorf("the slot protocol's control bytes for 256 slots: send %d, get %d; for 1: %d, %d; want a message per slot", oN, ogN, o1, og1)
	}
	for _, l := range []struct{ who, log string }{{"client", cliLog.String()}, {"server", srvLog.String()}} {
		if !strings.Contains(l.log, `does not offer lmrm (capability \"lmrm\"`) || !strings.Contains(l.log, "slot protocol") {
			t.Errorf("the %s did not say it fell back: %q", l.who, l.log)
		}
	}
}
