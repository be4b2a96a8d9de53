package enlarge

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A peer's malformed or out-of-range ENLARGE_REQ is counted and ignored; the
// channel goes on.
func TestBadRequestsIgnored(t *testing.T) {
	p := newPair(t, &Config{RingSlots: 8, GrowSlots: -1})
	for _, bad := range [][]byte{
		AppendReq(nil, Req{Phase: 0, Size: 100}),    // not above the current phase (no growth)
		AppendReq(nil, Req{Phase: 3, Size: 100}),    // beyond the ladder
		AppendReq(nil, Req{Phase: 1, Size: 0}),      // no size
		[]byte("XDEN\x01\x01\x00\x00garbage!"),      // right head, wrong length
		append([]byte("NOPE"), make([]byte, 12)...), // no magic
	} {
		p.a.mu.Lock()
		ok, err := p.a.post(bad, immReq)
		p.a.mu.Unlock()
		if !ok || err != nil {
			t.Fatalf("post: %v, %v", ok, err)
		}
	}
	until(t, p, "requests refused", func() bool { return p.b.Stats().ReqRefused == 5 })
	if s := p.b.Stats(); s.RecvPhase != 0 || s.ControlSent != 0 || s.RegisteredBytes != 8*512+MailboxLen {
		t.Fatalf("receiver after bad requests: %+v", s)
	}
	// the refused requests' slots were given back: more than a ring's worth
	// of messages still goes through
	for i := 0; i < 20; i++ {
		promote(t, p, 50)
	}
}

func TestMalformedRingMessagesFailClearly(t *testing.T) {
	for _, tc := range []struct {
		name string
		imm  uint32
		want string
	}{
		{"longer than the slot", makeImm(immData, 600), "600 B message in a 512 B slot"},
		{"unknown kind", 6 << immKindShift, "unknown message kind 6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, nil)
			wr := WorkRequest{ID: 1, Op: OpWriteImm, Local: p.a.mb, Length: 8, Imm: tc.imm,
				RemoteAddr: p.b.Endpoint().RingAddr, RKey: p.b.Endpoint().RingRKey}
			if err := p.fa.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			var err error
			deadline := time.Now().Add(2 * time.Second)
			for err == nil && time.Now().Before(deadline) {
				_, _, err = p.b.Recv(make([]byte, 100))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Recv error %v, want one saying %q", err, tc.want)
			}
			// sticky
			if _, err2 := p.b.Send([][]byte{{1}}); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("later Send: %v", err2)
			}
		})
	}
}

func TestLifecycleErrors(t *testing.T) {
	fa, fb := newFakePair(3)
	t.Cleanup(func() { fa.close(); fb.close() })
	pool, err := NewPool(fa, 4, 512)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(fa, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send([][]byte{{1}}); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Send before Connect: %v, want ErrNotConnected", err)
	}
	if _, _, err := c.Recv(nil); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Recv before Connect: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fa.regBytes.Load(); got != 4*512 {
		t.Errorf("%d B still registered after Close, want the pool's %d", got, 4*512)
	}
	if _, err := c.Send([][]byte{{1}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if err := c.Connect(Endpoint{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Connect after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := New(fa, pool, &Config{Ladder: []int{1024, 8192}}); !errors.Is(err, ErrConfig) {
		t.Errorf("pool slots smaller than the ring's: %v, want ErrConfig", err)
	}
	if _, err := NewPool(fa, 0, 512); !errors.Is(err, ErrConfig) {
		t.Errorf("empty pool: %v", err)
	}
}

func TestBlockingCallsHonourContext(t *testing.T) {
	p := newPair(t, nil)
	p.fb.setHook(func(wr *WorkRequest, d []byte) fakeAction { return fakeAction{Drop: wr.ID>>56 == idAck} })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	go func() { // the receiver runs, but its acks are lost
		for ctx.Err() == nil {
			p.b.Progress()
			time.Sleep(100 * time.Microsecond)
		}
	}()
	n, err := p.a.WriteContext(ctx, payload(5000, 1))
	if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WriteContext without an ack = %d, %v; want 0, DeadlineExceeded", n, err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if n, err := p.a.ReadContext(ctx2, make([]byte, 10)); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ReadContext with nothing sent = %d, %v", n, err)
	}
}
