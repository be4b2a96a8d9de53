package enlarge

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
)

// The protocol over the real roce/qp engine: eager, promotion through three
// phases, pieces over the top, stale keys refused, both directions.
func TestLabPromotionsOverRoCE(t *testing.T) {
	l := newLab(t, nil, false)
	small := payload(300, 1)
	l.send(l.a, small)
	if got := l.recv(l.b, 1000); !bytes.Equal(got, small) {
		t.Fatal("eager message damaged")
	}
	smallRing := l.b.ch.rx.ring
	l.transfer(payload(5000, 2))
	if s := l.a.ch.Stats(); s.SendPhase != 1 || s.Promotions != 1 || s.SendState != StateLarge {
		t.Fatalf("after 5000 B: %+v", s)
	}
	phase1 := l.b.ch.rx.ring
	l.transfer(payload(20000, 3))
	l.transfer(payload(300000, 4))
	l.transfer(payload(10, 5))
	if s := l.a.ch.Stats(); s.SendPhase != 2 || s.Promotions != 2 {
		t.Fatalf("after 20000 B: %+v", s)
	}
	if s := l.b.ch.Stats(); s.RecvPhase != 2 || s.RegisteredBytes != 128<<10+MailboxLen {
		t.Fatalf("receiver: %+v", s)
	}
	// the reverse direction is untouched and still works eagerly
	back := payload(400, 6)
	l.send(l.b, back)
	if got := l.recv(l.a, 1000); !bytes.Equal(got, back) {
		t.Fatal("reverse eager message damaged")
	}
	if s := l.b.ch.Stats(); s.SendPhase != 0 {
		t.Fatalf("reverse direction promoted: %+v", s)
	}
	// the freed buffers' rkeys are gone from b's key table...
	for name, r := range map[string]Region{"small ring": smallRing, "phase-1 buffer": phase1} {
		if _, err := l.b.tbl.Remote(l.b.pd, nil, r.RKey(), r.Addr(), 8, mr.RemoteWrite); !errors.Is(err, mr.ErrInvalidKey) {
			t.Errorf("%s rkey lookup: %v, want ErrInvalidKey", name, err)
		}
	}
	// ...and an RDMA WRITE with the phase-1 buffer's rkey is refused on the wire
	wr := WorkRequest{ID: 0xdead, Op: OpWrite, Local: l.a.ch.mb, Length: 8, RemoteAddr: phase1.Addr(), RKey: phase1.RKey()}
	if err := l.a.v.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		l.transmit(l.a, l.b)
		l.transmit(l.b, l.a)
	}
	var c [8]Completion
	n, err := l.a.v.Poll(c[:])
	if err != nil || n < 1 || c[0].ID != 0xdead {
		t.Fatalf("poll = %d, %v, %+v", n, err, c[0])
	}
	if c[0].Status != "IBV_WC_REM_ACCESS_ERR" {
		t.Errorf("write with the old rkey: %q, want IBV_WC_REM_ACCESS_ERR", c[0].Status)
	}
}

func TestLabAckWithoutTailTimesOut(t *testing.T) {
	l := newLab(t, nil, false)
	l.b.ch.setAckHook(func(a []byte) { clear(a[28:32]) })
	big := payload(5000, 1)
	for i := 0; i < 3; i++ {
		n, err := l.a.ch.Send([][]byte{big})
		if n != 0 || err != nil {
			t.Fatalf("call %d: Send = %d, %v", i, n, err)
		}
		l.settle()
	}
	s := l.a.ch.Stats()
	if s.SendState != StateRequested || s.AckRefused != 2 || s.ControlSent != 1 {
		t.Fatalf("sender: %+v; want requested, 2 refused checks, 1 request", s)
	}
}

// The eager path over the real roce/qp queue pair allocates nothing: Send,
// Recv and Progress (posting, polling, credits), measured apart from the
// lab's own frame shuffling.
func TestLabEagerPathAllocatesNothing(t *testing.T) {
	l := newLab(t, nil, false)
	msg := payload(200, 1)
	iov := [][]byte{msg}
	buf := make([]byte, 512)
	var ms runtime.MemStats
	mallocs := func() uint64 { runtime.ReadMemStats(&ms); return ms.Mallocs }
	var total uint64
	measure := func(f func()) {
		m0 := mallocs()
		f()
		total += mallocs() - m0
	}
	round := func() {
		measure(func() {
			if n, err := l.a.ch.Send(iov); n != len(msg) || err != nil {
				t.Fatalf("Send = %d, %v", n, err)
			}
		})
		for range 4 {
			l.transmit(l.a, l.b)
			l.transmit(l.b, l.a)
			measure(func() {
				l.a.ch.Progress()
				l.b.ch.Progress()
			})
		}
		measure(func() {
			if n, end, err := l.b.ch.Recv(buf); n != len(msg) || !end || err != nil {
				t.Fatalf("Recv = %d, %v, %v", n, end, err)
			}
		})
	}
	for range 50 {
		round()
	}
	// The counter is process-wide: goroutines left over from earlier tests
	// may allocate during a trial, so one clean trial of three is required
	// (an allocation per message would spoil every trial).
	var trials []uint64
	for range 3 {
		total = 0
		for range 200 {
			round()
		}
		if trials = append(trials, total); total == 0 {
			return
		}
	}
	t.Errorf("eager send + receive over roce/qp: %v allocations in three trials of 200 messages", trials)
}
