package enlarge

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"
)

var long = flag.Bool("long", false, "run the long variants")

// until calls f, letting both ends progress, until it reports true or a
// second passes.
func until(tb testing.TB, p *pair, what string, f func() bool) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		for _, c := range []*Channel{p.a, p.b} {
			if err := c.Progress(); err != nil {
				tb.Fatalf("progress: %v", err)
			}
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func payload(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// recvMsg reads one whole message from c, letting the pair progress.
func recvMsg(tb testing.TB, p *pair, c *Channel, max int) []byte {
	tb.Helper()
	buf := make([]byte, max)
	n := 0
	until(tb, p, "a message", func() bool {
		k, end, err := c.Recv(buf[n:])
		if err != nil {
			tb.Fatalf("recv: %v", err)
		}
		n += k
		return end
	})
	return buf[:n]
}

// n returns how many WRITE_WITH_IMMs of the given kind e has executed.
func (e *fakeEnd) n(kind uint32) int64 { return e.kinds[kind].Load() }

func TestStartupRegistersSmallRingAndMailboxOnly(t *testing.T) {
	p := newPair(t, nil)
	for _, c := range []*Channel{p.a, p.b} {
		s := c.Stats()
		if want := DefaultRingSlots*512 + MailboxLen; s.RegisteredBytes != want {
			t.Errorf("registered %d B at start, want %d", s.RegisteredBytes, want)
		}
		if s.SendPhase != 0 || s.RecvPhase != 0 || s.SendState != StateSmall {
			t.Errorf("start state %v/%d/%d, want small/0/0", s.SendState, s.SendPhase, s.RecvPhase)
		}
	}
	// nothing larger than the ring was registered (the pools are 64 × 512 B, shared)
	for _, r := range p.fa.net.all {
		if len(r.buf) > DefaultRingSlots*512 && len(r.buf) != 64*512 {
			t.Errorf("a %d B region registered at start", len(r.buf))
		}
	}
	if got, want := p.fa.regBytes.Load(), int64(DefaultRingSlots*512+MailboxLen+64*512); got != want {
		t.Errorf("fake end a holds %d B registered, want %d", got, want)
	}
}

func TestEagerMessagesAllFit(t *testing.T) {
	p := newPair(t, nil)
	iov := [][]byte{payload(100, 1), payload(460, 2), payload(1, 3)} // 460 = 90 % of 512
	n, err := p.a.Send(iov)
	if err != nil || n != 561 {
		t.Fatalf("Send = %d, %v; want 561, nil", n, err)
	}
	for i, want := range iov {
		if got := recvMsg(t, p, p.b, 1000); !bytes.Equal(got, want) {
			t.Fatalf("message %d: got %d B, want %d B (%x…)", i, len(got), len(want), want[:1])
		}
	}
	if got := p.fa.n(immData); got != 3 {
		t.Errorf("%d data writes, want 3", got)
	}
	if s := p.a.Stats(); s.ControlSent != 0 || s.SendState != StateSmall {
		t.Errorf("stats after eager sends: %+v", s)
	}
}

func TestEveryElementChecked(t *testing.T) {
	for _, tc := range oversizeVectors {
		t.Run(tc.name, func(t *testing.T) {
			p, log, iov := tc.start(t, nil)
			if s := p.a.Stats(); s.SendState != StateRequested || s.ControlSent != 1 {
				t.Fatalf("after Send: state %v, control %d; want requested, 1", s.SendState, s.ControlSent)
			}
			// the eager elements arrive, then the request is handled
			for i := range tc.sizes {
				if tc.sizes[i] > 460 {
					break
				}
				if got := recvMsg(t, p, p.b, 1000); !bytes.Equal(got, iov[i]) {
					t.Fatalf("eager element %d corrupted", i)
				}
			}
			until(t, p, "ack", func() bool { return p.b.Stats().RecvPhase == int(tc.wantPhase) })
			// the request went in a slot of the small ring
			if got := p.fa.n(immReq); got != 1 {
				t.Fatalf("%d requests, want 1", got)
			}
			var ack [AckLen]byte
			until(t, p, "ack in mailbox", func() bool {
				p.fa.Load(p.a.mb, mbAck, ack[:])
				_, ok := ParseAck(ack[:])
				return ok
			})
			a, _ := ParseAck(ack[:])
			if a.Phase != tc.wantPhase || int(a.Length) != p.b.cfg.RingBytes(int(tc.wantPhase)) {
				t.Errorf("ack %+v, want phase %d", a, tc.wantPhase)
			}
			if reqs, _ := log.get(); len(reqs) != 1 || reqs[0] != (Req{Phase: tc.wantPhase, Size: tc.wantSize}) {
				t.Errorf("requests %+v, want one {%d %d}", reqs, tc.wantPhase, tc.wantSize)
			}
		})
	}
}

func TestRequestRecordsSizeAndIsSentOnce(t *testing.T) {
	p := newPair(t, nil)
	big := payload(5000, 9)
	// The receiver does not run yet, so no ack comes.
	for i := 0; i < 5; i++ {
		n, err := p.a.Send([][]byte{big})
		if err != nil || n != 0 {
			t.Fatalf("call %d: Send = %d, %v; want 0, nil", i, n, err)
		}
		// while the request is out nothing goes into the old ring, small or not
		n, err = p.a.Send([][]byte{payload(10, 1)})
		if err != nil || n != 0 {
			t.Fatalf("call %d: small Send while requested = %d, %v; want 0, nil", i, n, err)
		}
	}
	// The fake executes posted work asynchronously: wait for the request,
	// then give any further (wrong) message the same time to show up.
	for deadline := time.Now().Add(2 * time.Second); p.fa.n(immReq) == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Microsecond) // no Progress: the receiver must not run
	}
	time.Sleep(time.Millisecond)
	if got := p.fa.n(immReq) + p.fa.n(immData) + p.fa.n(immMore); got != 1 || p.fa.n(immReq) != 1 {
		t.Fatalf("%d ring messages sent, want exactly the 1 request", got)
	}
	// decode the request from b's ring slot 0
	p.fb.Load(p.b.rx.ring, 0, p.b.load[:ReqLen])
	req, ok := ParseReq(p.b.load[:ReqLen])
	if !ok || req != (Req{Phase: 1, Size: 5000}) {
		t.Fatalf("request in ring = %+v, %v; want {1 5000}", req, ok)
	}
}

func TestReceiverPromotesAndAcks(t *testing.T) {
	p := newPair(t, nil)
	// an eager message the receiver has not read yet when the request comes
	early := payload(300, 4)
	if n, err := p.a.Send([][]byte{early}); n != 300 || err != nil {
		t.Fatalf("eager Send = %d, %v", n, err)
	}
	big := payload(5000, 5)
	if n, err := p.a.Send([][]byte{big}); n != 0 || err != nil {
		t.Fatalf("Send(5000) = %d, %v; want 0, nil", n, err)
	}
	oldRing := p.b.rx.ring.(*fakeRegion)
	until(t, p, "receiver promotion", func() bool { return p.b.Stats().RecvPhase == 1 })
	if !oldRing.dead.Load() {
		t.Error("old ring still registered after promotion")
	}
	if p.fb.net.lookup(oldRing.rkey) != nil || p.fb.net.lookup(oldRing.lkey) != nil {
		t.Error("old ring keys still valid")
	}
	s := p.b.Stats()
	if want := 8192 + MailboxLen; s.RegisteredBytes != want {
		t.Errorf("receiver registered %d B after promotion, want %d", s.RegisteredBytes, want)
	}
	if s.ControlSent != 1 || s.Promotions != 1 {
		t.Errorf("receiver stats %+v, want 1 control message and 1 promotion", s)
	}
	// the ack landed in a's mailbox, laid out head | addr | rkey | len | phase | tail
	var m [AckLen]byte
	until(t, p, "ack write", func() bool { p.fa.Load(p.a.mb, mbAck, m[:]); return headOK(m[:], TypeAck) })
	ring := p.b.rx.ring
	var want [AckLen]byte
	binary.BigEndian.PutUint32(want[0:], Magic)
	want[4], want[5] = byte(TypeAck), Version
	binary.BigEndian.PutUint64(want[8:], ring.Addr())
	binary.BigEndian.PutUint32(want[16:], ring.RKey())
	binary.BigEndian.PutUint32(want[20:], 8192)
	binary.BigEndian.PutUint32(want[24:], 1)
	binary.BigEndian.PutUint32(want[28:], TailFlag)
	if m != want {
		t.Fatalf("mailbox\n got %x\nwant %x", m, want)
	}
	// the early eager message survived the ring's release
	if got := recvMsg(t, p, p.b, 1000); !bytes.Equal(got, early) {
		t.Fatal("eager message queued before the request was lost or damaged")
	}
	// the sender picks the ack up on its next call and sends the data by WRITE_WITH_IMM
	until(t, p, "data sent", func() bool {
		n, err := p.a.Send([][]byte{big})
		if err != nil {
			t.Fatal(err)
		}
		return n == 5000
	})
	if got := recvMsg(t, p, p.b, 10000); !bytes.Equal(got, big) {
		t.Fatal("large message damaged")
	}
	if got := p.fa.n(immData); got != 2 {
		t.Errorf("%d data writes, want 2 (one eager, one large)", got)
	}
	sa := p.a.Stats()
	if sa.SendPhase != 1 || sa.SendState != StateLarge || sa.Promotions != 1 {
		t.Errorf("sender stats %+v", sa)
	}
	if want := DefaultRingSlots*512 + MailboxLen + 8192; sa.RegisteredBytes != want {
		t.Errorf("sender registered %d B, want %d (its ring, mailbox and the 8 KiB send buffer)", sa.RegisteredBytes, want)
	}
}

// promote drives a's sending direction to the phase that n bytes need.
func promote(t *testing.T, p *pair, n int) []byte {
	t.Helper()
	msg := payload(n, int64(n))
	buf := make([]byte, n+1)
	sent, got := 0, 0
	until(t, p, "message", func() bool {
		if sent < n {
			k, err := p.a.Send([][]byte{msg[sent:]})
			if err != nil {
				t.Fatal(err)
			}
			sent += k
		}
		k, end, err := p.b.Recv(buf[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += k
		return end
	})
	if sent != n || !bytes.Equal(buf[:got], msg) {
		t.Fatalf("%d B message damaged (sent %d, got %d)", n, sent, got)
	}
	return msg
}

func TestAckRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(ack []byte)
		hook   func(wr *WorkRequest, data []byte) fakeAction
	}{
		{name: "bad magic", damage: func(a []byte) { a[0] ^= 0xFF }},
		{name: "bad type", damage: func(a []byte) { a[4] = byte(TypeReq) }},
		{name: "bad version", damage: func(a []byte) { a[5] = 9 }},
		{name: "wrong phase", damage: func(a []byte) { binary.BigEndian.PutUint32(a[24:], 2) }},
		{name: "length out of range", damage: func(a []byte) { binary.BigEndian.PutUint32(a[20:], 1<<30) }},
		{name: "zero rkey", damage: func(a []byte) { binary.BigEndian.PutUint32(a[16:], 0) }},
		{name: "bad tail", damage: func(a []byte) { a[31] ^= 1 }},
		{name: "head without tail", hook: func(wr *WorkRequest, d []byte) fakeAction {
			return fakeAction{TailFrom: AckLen - 4, TailDrop: wr.ID>>56 == idAck}
		}},
		{name: "no head", hook: func(wr *WorkRequest, d []byte) fakeAction {
			return fakeAction{Drop: wr.ID>>56 == idAck}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, &Config{TailTimeout: 100 * time.Microsecond})
			p.b.setAckHook(tc.damage)
			if tc.hook != nil {
				p.fb.setHook(tc.hook)
			}
			big := payload(2000, 1)
			if n, err := p.a.Send([][]byte{big}); n != 0 || err != nil {
				t.Fatalf("Send = %d, %v", n, err)
			}
			until(t, p, "ack written", func() bool { return p.fb.n(immAck) == 1 })
			time.Sleep(time.Millisecond)
			for i := 0; i < 20; i++ {
				n, err := p.a.Send([][]byte{big, payload(10, 2)})
				if n != 0 || err != nil {
					t.Fatalf("call %d: Send = %d, %v; want 0, nil", i, n, err)
				}
			}
			if got := p.fa.n(immData) + p.fa.n(immMore); got != 0 {
				t.Errorf("%d data messages sent without a valid ack", got)
			}
			if got := p.fa.n(immReq); got != 1 {
				t.Errorf("request sent %d times, want once", got)
			}
			s := p.a.Stats()
			if s.SendState != StateRequested || s.SendPhase != 0 {
				t.Errorf("sender state %v phase %d, want requested 0", s.SendState, s.SendPhase)
			}
			if s.AckRefused == 0 {
				t.Error("AckRefused not counted")
			}
		})
	}
}

func TestLateTailAcceptedOnLaterCall(t *testing.T) {
	p := newPair(t, &Config{TailTimeout: 50 * time.Microsecond})
	p.fb.setHook(func(wr *WorkRequest, d []byte) fakeAction {
		if wr.ID>>56 != idAck {
			return fakeAction{}
		}
		return fakeAction{TailFrom: AckLen - 4, TailDelay: 30 * time.Millisecond}
	})
	big := payload(3000, 1)
	if n, err := p.a.Send([][]byte{big}); n != 0 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	until(t, p, "ack head", func() bool {
		var h [8]byte
		p.fa.Load(p.a.mb, mbAck, h[:])
		return headOK(h[:], TypeAck)
	})
	// head seen, tail 30 ms away: calls (racing the tail's writer) return 0
	if n, err := p.a.Send([][]byte{big}); n != 0 || err != nil {
		t.Fatalf("Send with head only = %d, %v; want 0, nil", n, err)
	}
	if p.a.Stats().AckRefused == 0 {
		t.Error("missing tail not counted")
	}
	sent := 0
	until(t, p, "data after the tail", func() bool {
		k, err := p.a.Send([][]byte{big})
		if err != nil {
			t.Fatal(err)
		}
		sent += k
		return sent == len(big)
	})
	if got := recvMsg(t, p, p.b, 5000); !bytes.Equal(got, big) {
		t.Fatal("data damaged")
	}
	if got := p.fa.n(immReq); got != 1 {
		t.Errorf("request sent %d times", got)
	}
}

func TestThreePhasesAndStaleKeysRefused(t *testing.T) {
	p := newPair(t, nil)
	smallRing := p.b.rx.ring
	promote(t, p, 1000)
	if s := p.a.Stats(); s.SendPhase != 1 {
		t.Fatalf("phase %d after 1000 B, want 1", s.SendPhase)
	}
	phase1Ring := p.b.rx.ring
	phase1Stage := p.a.tx.stage.(*fakeRegion)
	promote(t, p, 20000)
	if s := p.a.Stats(); s.SendPhase != 2 || s.Promotions != 2 {
		t.Fatalf("after 20000 B: %+v, want phase 2, 2 promotions", s)
	}
	if s := p.b.Stats(); s.RecvPhase != 2 || s.RegisteredBytes != 128<<10+MailboxLen {
		t.Fatalf("receiver after 20000 B: %+v", s)
	}
	until(t, p, "old send buffer freed", func() bool { return phase1Stage.dead.Load() })
	// over the top step: pieces of 128 KiB
	before := p.fa.n(immData) + p.fa.n(immMore)
	promote(t, p, 300000)
	if got := p.fa.n(immData) + p.fa.n(immMore) - before; got != 3 {
		t.Errorf("300000 B went in %d writes, want 3 pieces", got)
	}
	// small messages still work after promotion (they use the large buffer)
	promote(t, p, 7)
	// the keys of the freed rings are refused
	for name, r := range map[string]Region{"small ring": smallRing, "phase-1 buffer": phase1Ring} {
		src := p.a.mb
		wr := WorkRequest{ID: 77, Op: OpWrite, Local: src, Length: 8, RemoteAddr: r.Addr(), RKey: r.RKey()}
		if err := p.fa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		var wc [1]Completion
		deadline := time.Now().Add(time.Second)
		for {
			if n, _ := p.fa.Poll(wc[:]); n == 1 && wc[0].ID == 77 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no completion for the stale-key write")
			}
			time.Sleep(10 * time.Microsecond)
		}
		if wc[0].Status != "IBV_WC_REM_ACCESS_ERR" {
			t.Errorf("write with the %s's old rkey: status %q, want IBV_WC_REM_ACCESS_ERR", name, wc[0].Status)
		}
	}
}

func TestTwoConnectionsPromoteIndependently(t *testing.T) {
	p1 := newPair(t, nil)
	// Five messages one after another can find the credit for the first two
	// still in flight and grow connection 2's ring (a phase-0 request):
	// without growth, what is left to see is only connection 1's promotion.
	p2 := newPair(t, &Config{GrowSlots: -1})
	promote(t, p1, 4000)
	for i := 0; i < 5; i++ {
		promote(t, p2, 200)
	}
	if s := p1.a.Stats(); s.SendPhase != 1 || s.Promotions != 1 {
		t.Errorf("connection 1: %+v", s)
	}
	if s := p2.a.Stats(); s.SendPhase != 0 || s.Promotions != 0 || s.ControlSent != 0 {
		t.Errorf("connection 2 changed: %+v", s)
	}
	// and the reverse direction of connection 1 is still small
	if s := p1.b.Stats(); s.SendPhase != 0 || s.RecvPhase != 1 {
		t.Errorf("connection 1 reverse: %+v", s)
	}
	promote(t, p2, 100000)
	if s := p2.a.Stats(); s.SendPhase != 2 {
		t.Errorf("connection 2 went to phase %d, want 2 directly", s.SendPhase)
	}
	if s := p1.a.Stats(); s.SendPhase != 1 {
		t.Errorf("connection 1 moved to %d", s.SendPhase)
	}
}

func TestCreditsBoundTheRing(t *testing.T) {
	p := newPair(t, &Config{RingSlots: 16, GrowSlots: -1})
	// the receiver does not read: the sender fills exactly the 16 slots of a
	// ring that does not grow
	msgs := make([][]byte, 40)
	for i := range msgs {
		msgs[i] = payload(50, int64(i))
	}
	n, err := p.a.Send(msgs)
	if err != nil || n != 16*50 {
		t.Fatalf("Send = %d, %v; want %d (16 slots)", n, err, 16*50)
	}
	time.Sleep(time.Millisecond)
	if n, err := p.a.Send(msgs[16:]); n != 0 || err != nil {
		t.Fatalf("Send with a full ring = %d, %v; want 0", n, err)
	}
	got := 0
	until(t, p, "all messages", func() bool {
		got = recvInOrder(t, p.b, msgs, got)
		return got == 16
	})
	sent := 16
	until(t, p, "rest", func() bool {
		k, err := p.a.Send(msgs[sent:])
		if err != nil {
			t.Fatal(err)
		}
		sent += k / 50
		got = recvInOrder(t, p.b, msgs, got)
		return got == len(msgs)
	})
	if s := p.b.Stats(); s.CreditsSent == 0 {
		t.Error("no credit updates")
	}
}

// recvInOrder reads the whole messages that have arrived at c, each up to
// 100 bytes, checks them against msgs from index got on, and returns the new
// count.
func recvInOrder(t *testing.T, c *Channel, msgs [][]byte, got int) int {
	t.Helper()
	for {
		m := make([]byte, 100)
		k, end, err := c.Recv(m)
		if err != nil {
			t.Fatal(err)
		}
		if !end {
			return got
		}
		if got >= len(msgs) || !bytes.Equal(m[:k], msgs[got]) {
			t.Fatalf("message %d damaged or extra", got)
		}
		got++
	}
}

func TestBlockingWriteReadBothWays(t *testing.T) {
	p := newPair(t, &Config{LargeSlots: 2})
	sizes := []int{1, 460, 461, 3000, 7000, 8000, 20000, 117964, 131072, 300000, 5, 64}
	if *long {
		for i := 0; i < 200; i++ {
			sizes = append(sizes, rand.Intn(400000)+1)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for dir, ends := range [][2]*Channel{{p.a, p.b}, {p.b, p.a}} {
		w, r := ends[0], ends[1]
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i, s := range sizes {
				if n, err := w.WriteContext(ctx, payload(s, int64(i+dir*1000))); err != nil || n != s {
					errc <- errors.Join(err, errors.New("short write"))
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 400000)
			for i, s := range sizes {
				n, err := r.ReadContext(ctx, buf)
				if err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(buf[:n], payload(s, int64(i+dir*1000))) {
					errc <- errors.New("message damaged")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for _, c := range []*Channel{p.a, p.b} {
		s := c.Stats()
		if s.SendPhase != 2 || s.RecvPhase != 2 || s.Promotions != 4 {
			t.Errorf("stats %+v: want both directions at phase 2 after 2 promotions each", s)
		}
		if s.MessagesSent != uint64(len(sizes)) || s.MessagesRecv != uint64(len(sizes)) {
			t.Errorf("messages sent %d received %d, want %d", s.MessagesSent, s.MessagesRecv, len(sizes))
		}
	}
}

func TestReadShortBuffer(t *testing.T) {
	p := newPair(t, nil)
	msg := payload(400, 1)
	if n, err := p.a.Send([][]byte{msg}); n != 400 || err != nil {
		t.Fatal(n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	buf := make([]byte, 300)
	n, err := p.b.ReadContext(ctx, buf)
	if n != 300 || !errors.Is(err, ErrShortBuffer) || !bytes.Equal(buf, msg[:300]) {
		t.Fatalf("ReadContext = %d, %v", n, err)
	}
	n, err = p.b.ReadContext(ctx, buf)
	if n != 100 || err != nil || !bytes.Equal(buf[:100], msg[300:]) {
		t.Fatalf("second ReadContext = %d, %v", n, err)
	}
}

func TestContinuationChecked(t *testing.T) {
	p := newPair(t, &Config{Ladder: []int{512, 1000}})
	// promote to the 1000 B top step, then send 5000 B: 5 pieces, 1 slot
	promote(t, p, 900)
	msg := payload(5000, 1)
	n := 0
	until(t, p, "credit", func() bool {
		k, err := p.a.Send([][]byte{msg})
		if err != nil || (k != 0 && k != 1000) {
			t.Fatalf("Send = %d, %v; want 1000 (one piece, one slot)", k, err)
		}
		n = k
		return k > 0
	})
	if _, err := p.a.Send([][]byte{msg[:10]}); !errors.Is(err, ErrContinuation) {
		t.Fatalf("wrong continuation: %v, want ErrContinuation", err)
	}
	sent := n
	buf := make([]byte, 6000)
	got := 0
	until(t, p, "all pieces", func() bool {
		if sent < len(msg) {
			k, err := p.a.Send([][]byte{msg[sent:]})
			if err != nil {
				t.Fatal(err)
			}
			sent += k
		}
		k, end, err := p.b.Recv(buf[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += k
		return end
	})
	if !bytes.Equal(buf[:got], msg) {
		t.Fatal("pieced message damaged")
	}
}

func TestBaselineMode(t *testing.T) {
	p := newPair(t, &Config{Mode: Baseline})
	for _, c := range []*Channel{p.a, p.b} {
		if s := c.Stats(); s.RegisteredBytes != 32*4096+MailboxLen {
			t.Fatalf("baseline registered %d B, want %d", s.RegisteredBytes, 32*4096+MailboxLen)
		}
	}
	for _, n := range []int{100, 3686, 4000, 20000} {
		promote(t, p, n)
	}
	if s := p.a.Stats(); s.ControlSent != 0 || s.Promotions != 0 || s.SendPhase != 0 {
		t.Errorf("baseline promoted: %+v", s)
	}
	// 100 B, 3686 B (90 % of 4096) and 4000 B go whole; 20000 B in 5 pieces
	if d, m := p.fa.n(immData), p.fa.n(immMore); d != 4 || m != 4 {
		t.Errorf("%d whole/last writes and %d pieces, want 4 and 4", d, m)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{Threshold: 80}, true},
		{Config{Threshold: 100}, true},
		{Config{Threshold: 79}, false},
		{Config{Threshold: 101}, false},
		{Config{Ladder: []int{100, 1000}}, true},
		{Config{Ladder: []int{2000, 200000}}, true},
		{Config{Ladder: []int{99, 8192}}, false},
		{Config{Ladder: []int{2001, 8192}}, false},
		{Config{Ladder: []int{512, 999}}, false},
		{Config{Ladder: []int{512, 200001}}, false},
		{Config{Ladder: []int{512}}, false},
		{Config{Ladder: []int{512, 8192, 8192}}, false},
		{Config{Ladder: []int{2000, 1500}}, false},
		{Config{Ladder: []int{512, 8192, 4096}}, false},
		{Config{Ladder: []int{512, 1000, 2000, 4000, 8000}}, true},
		{Config{RingSlots: -1}, false},
		{Config{LargeSlots: 17}, false},
		{Config{TailTimeout: -1}, false},
		{Config{AckTimeout: 100 * time.Microsecond}, false}, // under the 200 µs tail timeout
		{Config{AckTimeout: 200 * time.Microsecond, MaxAckTimeouts: 1}, true},
		{Config{AckTimeout: 2 * time.Hour}, false},
		{Config{MaxAckTimeouts: -1, WholeVectorLarge: true}, true},
		{Config{Mode: 7}, false},
		{Config{Mode: Baseline}, true},
		{Config{Mode: Baseline, Ladder: []int{512, 8192}}, false},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: error %v does not wrap ErrConfig", tc.cfg, err)
		}
		if _, err := New(nil, nil, &tc.cfg); err == nil {
			t.Errorf("New accepted a nil pool")
		}
	}
}

func TestEagerPathAllocatesNothing(t *testing.T) {
	p := newPair(t, nil)
	msg := payload(200, 1)
	buf := make([]byte, 512)
	iov := [][]byte{msg}
	step := func() {
		for {
			n, err := p.a.Send(iov)
			if err != nil {
				t.Fatal(err)
			}
			if n == len(msg) {
				break
			}
			// a credit still in flight can make the sender ask for the
			// grown ring, which the receiver answers in its own calls
			if err := p.b.Progress(); err != nil {
				t.Fatal(err)
			}
			runtime.Gosched()
		}
		for {
			n, end, err := p.b.Recv(buf)
			if err != nil {
				t.Fatal(err)
			}
			if end {
				if n != len(msg) {
					t.Fatalf("got %d B", n)
				}
				break
			}
			runtime.Gosched()
		}
	}
	for i := 0; i < 100; i++ { // warm up: queues reach their size
		step()
	}
	if a := testing.AllocsPerRun(200, step); a != 0 {
		t.Errorf("eager send+receive allocates %.1f times per message", a)
	}
}

func TestThresholdConfigurable(t *testing.T) {
	for _, tc := range []struct {
		pct, size int
		eager     bool
	}{
		{80, 409, true}, {80, 410, false}, // 80 % of 512 = 409.6
		{90, 460, true}, {90, 461, false},
		{100, 512, true}, {100, 513, false},
	} {
		p := newPair(t, &Config{Threshold: tc.pct})
		n, err := p.a.Send([][]byte{payload(tc.size, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if got := n == tc.size; got != tc.eager {
			t.Errorf("threshold %d%%, %d B: Send = %d, want eager=%v", tc.pct, tc.size, n, tc.eager)
		}
		if s := p.a.Stats(); (s.SendState == StateRequested) == tc.eager {
			t.Errorf("threshold %d%%, %d B: state %v", tc.pct, tc.size, s.SendState)
		}
	}
}
