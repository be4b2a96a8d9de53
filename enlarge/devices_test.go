package enlarge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// devLab opens connections between two roce devices over link/pipe, one
// channel end on each device per connection, with one shared Pool per
// device.
type devLab struct {
	cfg    Config
	da, db *roce.Device
	pa, pb *roce.PD
	poolA  *Pool
	poolB  *Pool
	conns  []devConn
	closed bool
	co     *roce.ConnectOptions
	la, lb *pipe.Link
}

type devConn struct {
	a, b   *Channel
	qa, qb *roce.QP
}

var (
	devAddrA = netip.MustParseAddr("198.51.100.1")
	devAddrB = netip.MustParseAddr("198.51.100.2")
)

func newDevLab(tb testing.TB, cfg *Config, n int) *devLab {
	return newDevLabOn(tb, cfg, n, pipe.Config{MTU: 1500, Depth: 8192, TxBuffers: 2048}, nil)
}

// newDevLabOn is newDevLab over a pipe with the given configuration
// (faults) and connection options.
func newDevLabOn(tb testing.TB, cfg *Config, n int, pc pipe.Config, co *roce.ConnectOptions) *devLab {
	tb.Helper()
	c, err := cfg.withDefaults()
	if err != nil {
		tb.Fatal(err)
	}
	la, lb, err := pipe.New(pc)
	if err != nil {
		tb.Fatal(err)
	}
	l := &devLab{cfg: c, co: co, la: la, lb: lb}
	if l.da, err = roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{devAddrA}}); err != nil {
		tb.Fatal(err)
	}
	if l.db, err = roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{devAddrB}}); err != nil {
		l.da.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(l.close)
	l.pa, l.pb = l.da.AllocPD(), l.db.AllocPD()
	for i := 0; i < n; i++ {
		if err := l.open(uint32(i)); err != nil {
			tb.Fatalf("connection %d: %v", i, err)
		}
	}
	return l
}

func (l *devLab) qpConfig(cq *roce.CQ) roce.QPConfig {
	send, recv, _, _ := l.cfg.QueueDepths()
	return roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: send, MaxRecvWR: recv, MaxSGE: 1, MaxInline: -1,
		SendWindow: 64} // go-back-N stays cheap on the lossy pipe
}

// open makes connection i: two queue pairs, connected, and a channel on each.
func (l *devLab) open(i uint32) error {
	_, _, cqDepth, _ := l.cfg.QueueDepths()
	mk := func(d *roce.Device, pd *roce.PD) (*roce.QP, *roce.CQ, error) {
		cq, err := d.CreateCQ(cqDepth)
		if err != nil {
			return nil, nil, err
		}
		q, err := pd.CreateQP(l.qpConfig(cq))
		return q, cq, err
	}
	qa, cqa, err := mk(l.da, l.pa)
	if err != nil {
		return err
	}
	qb, cqb, err := mk(l.db, l.pb)
	if err != nil {
		return err
	}
	gidA, gidB := netip.AddrFrom16(devAddrA.As16()), netip.AddrFrom16(devAddrB.As16())
	psnA, psnB := (i*7919+0x100)&0xFFFFFF, (i*104729+0x200)&0xFFFFFF
	if err := qa.Connect(psnA, roce.Endpoint{QPN: qb.QPN(), PSN: psnB, GID: gidB}, l.co); err != nil {
		return err
	}
	if err := qb.Connect(psnB, roce.Endpoint{QPN: qa.QPN(), PSN: psnA, GID: gidA}, l.co); err != nil {
		return err
	}
	va := NewVerbs(qa, l.pa, cqa, nil)
	vb := NewVerbs(qb, l.pb, cqb, nil)
	slot := l.cfg.Ladder[0]
	if l.poolA == nil {
		if l.poolA, err = NewPool(va, 64, slot); err != nil {
			return err
		}
		if l.poolB, err = NewPool(vb, 64, slot); err != nil {
			return err
		}
	}
	cfg := l.cfg
	a, err := New(va, l.poolA, &cfg)
	if err != nil {
		return err
	}
	b, err := New(vb, l.poolB, &cfg)
	if err != nil {
		return err
	}
	if err := a.Connect(b.Endpoint()); err != nil {
		return err
	}
	if err := b.Connect(a.Endpoint()); err != nil {
		return err
	}
	l.conns = append(l.conns, devConn{a: a, b: b, qa: qa, qb: qb})
	return nil
}

// registered is every byte both ends have registered for the connections:
// rings, mailboxes, send buffers and the two shared pools.
func (l *devLab) registered() int {
	n := l.poolA.RegisteredBytes() + l.poolB.RegisteredBytes()
	for _, c := range l.conns {
		n += c.a.Stats().RegisteredBytes + c.b.Stats().RegisteredBytes
	}
	return n
}

// pingAll sends one message of size bytes over every connection, a to b, and
// waits until each has arrived intact.
func (l *devLab) pingAll(tb testing.TB, size int) {
	tb.Helper()
	msg := payload(size, 42)
	sent := make([]int, len(l.conns))
	got := make([]int, len(l.conns))
	done := 0
	buf := make([]byte, size+1)
	deadline := time.Now().Add(60 * time.Second)
	for done < len(l.conns) {
		if time.Now().After(deadline) {
			tb.Fatalf("ping: %d of %d connections delivered", done, len(l.conns))
		}
		progress := false
		for i, c := range l.conns {
			if sent[i] < size {
				k, err := c.a.Send([][]byte{msg[sent[i]:]})
				if err != nil {
					tb.Fatalf("connection %d: send: %v", i, err)
				}
				sent[i] += k
				progress = progress || k > 0
			} else if err := c.a.Progress(); err != nil { // gives the pool slot back
				tb.Fatalf("connection %d: %v", i, err)
			}
			if got[i] >= 0 {
				k, end, err := c.b.Recv(buf[got[i]:])
				if err != nil {
					tb.Fatalf("connection %d: recv: %v", i, err)
				}
				got[i] += k
				progress = progress || k > 0
				if end {
					if !bytes.Equal(buf[:got[i]], msg) {
						tb.Fatalf("connection %d: message damaged", i)
					}
					got[i] = -1
					done++
				}
			}
		}
		if !progress {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func (l *devLab) close() {
	if l.closed {
		return
	}
	l.closed = true
	l.da.Close()
	l.db.Close()
	for _, c := range l.conns {
		c.a.Close()
		c.b.Close()
	}
	if l.poolA != nil {
		l.poolA.Close()
		l.poolB.Close()
	}
}

// The protocol between two real devices (progress engines on their own
// goroutines): both directions of two connections stream messages through
// every phase with blocking Write and Read. Run it with -race: the mailbox
// handoff from the engines to the callers is checked here.
func TestDevicesStreamBothWays(t *testing.T) {
	stream(t, newDevLab(t, &Config{LargeSlots: 2}, 2))
}

// Over a link that loses, reorders, duplicates and corrupts frames: RC
// recovers underneath, and the protocol (requests, acks, credits) too.
func TestDevicesStreamLossyLink(t *testing.T) {
	f := pipe.Faults{Loss: 0.01, Reorder: 0.005, Duplicate: 0.005, Corrupt: 0.002}
	co := roce.DefaultConnectOptions()
	co.Timeout = 14 // ≈ 67 ms: spurious timeouts under -race on a loaded machine spend retries
	l := newDevLabOn(t, &Config{LargeSlots: 2}, 2,
		pipe.Config{MTU: 1500, Depth: 8192, TxBuffers: 2048, Seed: 7, AtoB: f, BtoA: f}, &co)
	stream(t, l)
	sa, sb := l.la.Stats(), l.lb.Stats()
	if sa.Lost+sb.Lost == 0 || sa.Corrupted+sb.Corrupted == 0 || sa.Duplicated+sb.Duplicated == 0 {
		t.Errorf("faults did not happen: %+v %+v", sa, sb)
	}
	t.Logf("a→b %+v, b→a %+v", sa, sb)
}

func stream(t *testing.T, l *devLab) {
	sizes := []int{1, 460, 461, 3000, 8000, 20000, 131072, 300000, 17}
	if *long {
		for i := 0; i < 100; i++ {
			sizes = append(sizes, (i*7919)%400000+1)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for ci, c := range l.conns {
		for dir, ends := range [][2]*Channel{{c.a, c.b}, {c.b, c.a}} {
			w, r := ends[0], ends[1]
			seed := int64(ci*10000 + dir*1000)
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i, s := range sizes {
					if n, err := w.WriteContext(ctx, payload(s, seed+int64(i))); err != nil || n != s {
						errc <- fmt.Errorf("write %d B: %d, %w", s, n, err)
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				buf := make([]byte, 400001)
				for i, s := range sizes {
					n, err := r.ReadContext(ctx, buf)
					if err != nil {
						errc <- fmt.Errorf("read message %d: %w", i, err)
						return
					}
					if !bytes.Equal(buf[:n], payload(s, seed+int64(i))) {
						errc <- errors.New("message damaged")
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for _, c := range l.conns {
		for _, ch := range []*Channel{c.a, c.b} {
			if s := ch.Stats(); s.SendPhase != 2 || s.RecvPhase != 2 || s.Promotions != 4 {
				t.Errorf("stats %+v, want phase 2 both ways after 2+2 promotions", s)
			}
		}
	}
}

func TestDevicesRegisteredAtRest(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		want int // per connection, both ends, without the pools
	}{
		{Enlarge, 2 * (DefaultRingSlots*512 + MailboxLen)},
		{Baseline, 2 * (32*4096 + MailboxLen)},
	} {
		l := newDevLab(t, &Config{Mode: tc.mode}, 10)
		l.pingAll(t, 100)
		pools := l.poolA.RegisteredBytes() + l.poolB.RegisteredBytes()
		if got := l.registered() - pools; got != 10*tc.want {
			t.Errorf("%v: %d B registered for 10 connections, want %d", tc.mode, got, 10*tc.want)
		}
		l.close()
	}
}

// Closing a channel after its device gives back the pool slots of sends that
// were still in flight (flushed).
func TestDevicesCloseReturnsPoolSlots(t *testing.T) {
	l := newDevLab(t, nil, 3)
	for _, c := range l.conns {
		if n, err := c.a.Send([][]byte{payload(100, 1), payload(200, 2)}); n != 300 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
	}
	if free := l.poolA.Free(); free != 64-6 {
		t.Fatalf("%d pool slots free after 6 sends, want %d", free, 64-6)
	}
	l.close()
	if free := l.poolA.Free(); free != 64 {
		t.Errorf("%d of 64 pool slots back after close", free)
	}
}
