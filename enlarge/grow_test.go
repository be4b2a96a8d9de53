package enlarge

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// A channel whose peer answers each message before the next (one message out
// at a time) keeps the small ring: credits come back every two messages, so
// the sender never reaches the ring's last free slot.
func TestRingStaysSmallForRequestResponse(t *testing.T) {
	p := newPair(t, nil)
	for i := range 50 {
		msg := payload(50, int64(i))
		until(t, p, "request sent", func() bool {
			n, err := p.a.Send([][]byte{msg})
			if err != nil {
				t.Fatal(err)
			}
			return n == len(msg)
		})
		if got := recvMsg(t, p, p.b, 100); !bytes.Equal(got, msg) {
			t.Fatalf("request %d damaged", i)
		}
		until(t, p, "response sent", func() bool {
			n, err := p.b.Send([][]byte{msg[:8]})
			if err != nil {
				t.Fatal(err)
			}
			return n == 8
		})
		if got := recvMsg(t, p, p.a, 100); !bytes.Equal(got, msg[:8]) {
			t.Fatalf("response %d damaged", i)
		}
	}
	for _, c := range []*Channel{p.a, p.b} {
		s := c.Stats()
		if s.Promotions != 0 || s.ControlSent != 0 || s.RegisteredBytes != DefaultRingSlots*512+MailboxLen {
			t.Errorf("after 50 round trips: %+v, want no growth and %d B registered", s, DefaultRingSlots*512+MailboxLen)
		}
		if s.CreditsSent < 20 || s.CreditsSent > 26 {
			t.Errorf("%d credit updates for 50 messages, want one every two", s.CreditsSent)
		}
	}
}

// A burst grows the ring once: the first Send stops after three messages
// (the request took the last slot), the ack brings the grown ring, and from
// then on the sender has exactly GrowSlots messages out while the receiver
// reads nothing. A second request for phase 0 is refused; every message
// arrives, in order.
func TestRingGrowsOnDemand(t *testing.T) {
	p := newPair(t, nil)
	msgs := make([][]byte, 40)
	for i := range msgs {
		msgs[i] = payload(50, int64(100+i))
	}
	n, err := p.a.Send(msgs)
	if err != nil || n != 3*50 {
		t.Fatalf("first Send = %d, %v; want %d (three slots, the request in the fourth)", n, err, 3*50)
	}
	if n, err := p.a.Send(msgs[3:]); n != 0 || err != nil {
		t.Fatalf("Send before the ack = %d, %v; want 0", n, err)
	}
	// the receiver only progresses (answers the request), it reads nothing
	sent := 3
	until(t, p, "the grown ring filled", func() bool {
		k, err := p.a.Send(msgs[sent:])
		if err != nil {
			t.Fatal(err)
		}
		sent += k / 50
		return sent == 3+DefaultGrowSlots
	})
	if k, err := p.a.Send(msgs[sent:]); k != 0 || err != nil {
		t.Fatalf("Send with the grown ring full = %d, %v; want 0", k, err)
	}
	sa, sb := p.a.Stats(), p.b.Stats()
	if sa.Promotions != 1 || sa.SendPhase != 0 || sa.SendState != StateSmall || sa.ControlSent != 1 {
		t.Errorf("sender after growth: %+v", sa)
	}
	if sb.Promotions != 1 || sb.RecvPhase != 0 || sb.RegisteredBytes != DefaultGrowSlots*512+MailboxLen {
		t.Errorf("receiver after growth: %+v", sb)
	}
	// a second request for phase 0 is not above what the receiver has
	p.a.mu.Lock()
	ok, err := p.a.post(AppendReq(nil, Req{Phase: 0, Size: 50}), immReq)
	p.a.mu.Unlock()
	if ok || err != nil {
		t.Fatalf("post into a full ring: %v, %v", ok, err)
	}
	got := 0
	until(t, p, "all messages", func() bool {
		got = recvInOrder(t, p.b, msgs, got)
		if sent < len(msgs) {
			k, err := p.a.Send(msgs[sent:])
			if err != nil {
				t.Fatal(err)
			}
			sent += k / 50
		}
		return got == len(msgs)
	})
	// once the last credits are back, a second request for phase 0
	until(t, p, "room for the second request", func() bool {
		p.a.mu.Lock()
		ok, err := p.a.post(AppendReq(nil, Req{Phase: 0, Size: 50}), immReq)
		p.a.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	until(t, p, "the second request refused", func() bool { return p.b.Stats().ReqRefused == 1 })
	if s := p.b.Stats(); s.Promotions != 1 || s.RegisteredBytes != DefaultGrowSlots*512+MailboxLen {
		t.Errorf("receiver after a second phase-0 request: %+v", s)
	}
	// and the channel still promotes by size from the grown ring
	promote(t, p, 5000)
	if s := p.a.Stats(); s.SendPhase != 1 || s.Promotions != 2 {
		t.Errorf("after a 5000 B message: %+v", s)
	}
}

// A peer configured without growth refuses the request; the sender's
// direction fails after its ack timeouts, as for any unanswered request.
func TestRingGrowthRefusedByPeer(t *testing.T) {
	cfg := &Config{AckTimeout: 2e6, MaxAckTimeouts: 2, TailTimeout: 1e3}
	p := newPairCfgs(t, cfg, &Config{AckTimeout: 2e6, MaxAckTimeouts: 2, TailTimeout: 1e3, GrowSlots: -1})
	msgs := make([][]byte, 8)
	for i := range msgs {
		msgs[i] = payload(50, int64(i))
	}
	if n, err := p.a.Send(msgs); n != 150 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	var err error
	until(t, p, "the ack timeouts", func() bool {
		_, err = p.a.Send(msgs[3:])
		return err != nil
	})
	until(t, p, "the receiver refusing the request", func() bool { return p.b.Stats().ReqRefused == 1 })
	if s := p.b.Stats(); s.Promotions != 0 || s.RegisteredBytes != DefaultRingSlots*512+MailboxLen {
		t.Errorf("receiver: %+v", s)
	}
	if !errors.Is(err, ErrAckTimeout) || !strings.Contains(err.Error(), "phase 0") {
		t.Errorf("sender: %v, want ErrAckTimeout for phase 0", err)
	}
}
