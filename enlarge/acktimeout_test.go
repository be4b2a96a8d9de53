package enlarge

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// ackFaults are the ways an ENLARGE_ACK fails to arrive whole: never
// written, corrupt, or without its tail.
var ackFaults = []struct {
	name   string
	damage func(ack []byte)
	hook   func(wr *WorkRequest, data []byte) fakeAction
}{
	{name: "never acks", hook: func(wr *WorkRequest, d []byte) fakeAction {
		return fakeAction{Drop: wr.ID>>56 == idAck}
	}},
	{name: "corrupt", damage: func(a []byte) { a[0] ^= 0xFF }},
	{name: "wrong phase", damage: func(a []byte) { a[27] = 2 }},
	{name: "head without tail", hook: func(wr *WorkRequest, d []byte) fakeAction {
		return fakeAction{TailFrom: AckLen - 4, TailDrop: wr.ID>>56 == idAck}
	}},
}

// runPeer makes b answer requests (Progress) until the returned stop is
// called.
func runPeer(p *pair) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			p.b.Progress()
			time.Sleep(50 * time.Microsecond)
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// TestAckTimeoutFailsDirection: with a peer whose ack never arrives whole,
// the non-blocking Send returns 0 bytes and no error (the seed's answer) on
// every call while fewer than MaxAckTimeouts ack timeouts have passed since
// the request, counting them in Stats.AckTimeouts; then it returns an error
// wrapping ErrAckTimeout, and keeps returning it at once. No data went out,
// the request went once, and the other direction still works.
func TestAckTimeoutFailsDirection(t *testing.T) {
	const period, limit = 10 * time.Millisecond, 3
	for _, tc := range ackFaults {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, &Config{TailTimeout: 100 * time.Microsecond, AckTimeout: period, MaxAckTimeouts: limit})
			p.b.setAckHook(tc.damage)
			if tc.hook != nil {
				p.fb.setHook(tc.hook)
			}
			stop := runPeer(p)
			big := payload(2000, 1)
			start := time.Now()
			var err error
			calls, seen, last := 0, map[int]bool{}, 0 // ack timeouts seen by the calls before the error
			for ; time.Since(start) < 2*time.Second; calls++ {
				var n int
				n, err = p.a.Send([][]byte{big})
				if err != nil {
					break
				}
				if n != 0 {
					t.Fatalf("call %d: Send = %d bytes without a valid ack", calls, n)
				}
				k := p.a.Stats().AckTimeouts
				if k < last {
					t.Fatalf("Stats.AckTimeouts went from %d to %d", last, k)
				}
				seen[k], last = true, k
				time.Sleep(100 * time.Microsecond)
			}
			elapsed := time.Since(start)
			stop()
			if !errors.Is(err, ErrAckTimeout) {
				t.Fatalf("after %d calls in %v: Send error %v, want ErrAckTimeout", calls, elapsed, err)
			}
			t.Logf("%d calls, %v: %v", calls, elapsed, err)
			if elapsed < limit*period {
				t.Errorf("failed after %v, before %d ack timeouts of %v", elapsed, limit, period)
			}
			if calls < 2 || !seen[0] {
				t.Errorf("the error came on call %d (ack timeouts seen before it: %v), want 0 bytes, no error first", calls+1, seen)
			}
			if s := p.a.Stats(); s.AckTimeouts < limit || s.SendState != StateRequested {
				t.Errorf("stats after the error: %d ack timeouts, state %v", s.AckTimeouts, s.SendState)
			}
			if n, err2 := p.a.Send([][]byte{payload(10, 2)}); n != 0 || !errors.Is(err2, ErrAckTimeout) {
				t.Errorf("Send after the error = %d, %v; want 0, ErrAckTimeout", n, err2)
			}
			if got := p.fa.n(immData) + p.fa.n(immMore); got != 0 {
				t.Errorf("%d data messages sent without a valid ack", got)
			}
			if got := p.fa.n(immReq); got != 1 {
				t.Errorf("request sent %d times, want once", got)
			}
			// the receiving direction of the failed end is unaffected
			p.fb.setHook(nil)
			msg := payload(300, 3)
			if n, err := p.b.Send([][]byte{msg}); n != len(msg) || err != nil {
				t.Fatalf("b.Send = %d, %v", n, err)
			}
			buf := make([]byte, 1000)
			var got int
			until(t, p, "b's message", func() bool {
				k, end, err := p.a.Recv(buf[got:])
				if err != nil {
					t.Fatalf("a.Recv: %v", err)
				}
				got += k
				return end
			})
			if !bytes.Equal(buf[:got], msg) {
				t.Error("b's message damaged")
			}
		})
	}
}

// TestAckTimeoutUnblocksWrite: a blocking Write on a direction whose ack never
// arrives whole returns ErrAckTimeout after about MaxAckTimeouts ×
// AckTimeout, with no context deadline; with MaxAckTimeouts negative it waits
// until its context ends, as before.
func TestAckTimeoutUnblocksWrite(t *testing.T) {
	const period, limit = 5 * time.Millisecond, 4
	for _, tc := range ackFaults {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, &Config{AckTimeout: period, MaxAckTimeouts: limit})
			p.b.setAckHook(tc.damage)
			if tc.hook != nil {
				p.fb.setHook(tc.hook)
			}
			stop := runPeer(p)
			defer stop()
			type res struct {
				n   int
				err error
				d   time.Duration
			}
			done := make(chan res, 1)
			go func() {
				start := time.Now()
				n, err := p.a.Write(payload(5000, 1))
				done <- res{n, err, time.Since(start)}
			}()
			select {
			case r := <-done:
				if r.n != 0 || !errors.Is(r.err, ErrAckTimeout) {
					t.Errorf("Write = %d, %v; want 0, ErrAckTimeout", r.n, r.err)
				}
				if r.d < limit*period {
					t.Errorf("Write failed after %v, before %d × %v", r.d, limit, period)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Write still blocked after 5 s")
			}
		})
	}
	t.Run("never give up", func(t *testing.T) {
		p := newPair(t, &Config{AckTimeout: time.Millisecond, MaxAckTimeouts: -1})
		p.fb.setHook(ackFaults[0].hook)
		stop := runPeer(p)
		defer stop()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		if n, err := p.a.WriteContext(ctx, payload(5000, 1)); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WriteContext = %d, %v; want 0, DeadlineExceeded", n, err)
		}
	})
}

// TestAckTimeoutNotCountedWhenAckValid: an ack that arrives late, but before
// the limit, promotes as usual; ack timeouts counted meanwhile do not stay
// against a later promotion.
func TestAckTimeoutNotCountedWhenAckValid(t *testing.T) {
	p := newPair(t, &Config{AckTimeout: 5 * time.Millisecond, MaxAckTimeouts: 100})
	big := payload(1000, 1)
	// nobody answers for three ack timeouts
	for p.a.Stats().AckTimeouts < 3 {
		if n, err := p.a.Send([][]byte{big}); n != 0 || err != nil {
			t.Fatalf("Send while the peer is away = %d, %v", n, err)
		}
		time.Sleep(200 * time.Microsecond)
	}
	sendVector(t, p, [][]byte{big})
	// the next promotion starts from zero (its request goes once the one
	// slot of the 8 KiB buffer is credited back)
	until(t, p, "the second request", func() bool {
		if n, err := p.a.Send([][]byte{payload(20000, 2)}); n != 0 || err != nil {
			t.Fatalf("Send(20000) = %d, %v", n, err)
		}
		return p.a.Stats().ControlSent == 2
	})
	if s := p.a.Stats(); s.AckTimeouts != 0 || s.SendState != StateRequested || s.SendPhase != 1 {
		t.Errorf("after the second request: %d ack timeouts, state %v phase %d", s.AckTimeouts, s.SendState, s.SendPhase)
	}
	sendVector(t, p, [][]byte{payload(20000, 2)})
}
