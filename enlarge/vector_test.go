package enlarge

import (
	"bytes"
	"sync"
	"testing"
)

// vectorCase is an iovec with (or without) an element over the 460 B
// threshold of the 512 B ring: the bytes Send sends before the request by
// default (the eager prefix), and the request it makes.
type vectorCase struct {
	name      string
	sizes     []int
	wantN     int
	wantPhase uint32
	wantSize  uint32
}

// oversizeVectors are TestEveryElementChecked's cases; TestWholeVectorLarge
// runs them with Config.WholeVectorLarge, where the prefix is never sent.
var oversizeVectors = []vectorCase{
	{"first", []int{461, 10}, 0, 1, 461},
	{"middle", []int{10, 20, 600, 30}, 30, 1, 600},
	{"last", []int{10, 20, 30, 461}, 60, 1, 461},
	{"largest later decides", []int{100, 600, 20000, 5}, 100, 2, 20000},
	{"over the top", []int{300000}, 0, 2, 300000},
	{"over the top with a prefix", []int{7, 300000, 9}, 7, 2, 300000},
}

// start makes a pair with configuration cfg, logging a's writes, and sends
// the case's vector once, checking the bytes Send reports.
func (tc *vectorCase) start(t *testing.T, cfg *Config) (*pair, *wireLog, [][]byte) {
	t.Helper()
	p := newPair(t, cfg)
	log := &wireLog{}
	log.attach(p.fa, p.b.Endpoint().RingRKey)
	var iov [][]byte
	for i, s := range tc.sizes {
		iov = append(iov, payload(s, int64(i)))
	}
	if n, err := p.a.Send(iov); err != nil || n != tc.wantN {
		t.Fatalf("Send = %d, %v; want %d, nil", n, err, tc.wantN)
	}
	return p, log, iov
}

// wireLog records, from a fake end's engine, the ENLARGE_REQs it writes and
// how many data writes (whole messages and pieces) went into the peer's
// phase-0 ring.
type wireLog struct {
	mu        sync.Mutex
	reqs      []Req
	smallData int
}

func (l *wireLog) attach(e *fakeEnd, ringRKey uint32) {
	e.setHook(func(wr *WorkRequest, d []byte) fakeAction {
		if wr.Op != OpWriteImm {
			return fakeAction{}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		switch wr.Imm >> immKindShift {
		case immReq:
			r, _ := ParseReq(d)
			l.reqs = append(l.reqs, r)
		case immData, immMore:
			if wr.RKey == ringRKey {
				l.smallData++
			}
		}
		return fakeAction{}
	})
}

func (l *wireLog) get() ([]Req, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Req(nil), l.reqs...), l.smallData
}

// vectorRest is what is left of iov after n of its bytes have been sent.
func vectorRest(iov [][]byte, n int) [][]byte {
	for len(iov) > 0 && n >= len(iov[0]) {
		n -= len(iov[0])
		iov = iov[1:]
	}
	if len(iov) > 0 && n > 0 {
		iov = append([][]byte{iov[0][n:]}, iov[1:]...)
	}
	return iov
}

// sendVector sends iov from a to b (re-calling Send with the rest until all
// is sent) and checks that b receives each element, in order, byte-exact.
func sendVector(t *testing.T, p *pair, iov [][]byte) {
	t.Helper()
	rest, got := iov, 0
	buf := make([]byte, 400000)
	n := 0
	until(t, p, "the vector", func() bool {
		if len(rest) > 0 {
			k, err := p.a.Send(rest)
			if err != nil {
				t.Fatalf("Send: %v", err)
			}
			rest = vectorRest(rest, k)
		}
		for got < len(iov) {
			k, end, err := p.b.Recv(buf[n:])
			if err != nil {
				t.Fatalf("Recv: %v", err)
			}
			n += k
			if !end {
				break
			}
			if !bytes.Equal(buf[:n], iov[got]) {
				t.Fatalf("element %d (%d B) arrived as %d B, or damaged", got, len(iov[got]), n)
			}
			got, n = got+1, 0
		}
		return got == len(iov)
	})
}

// TestWholeVectorLarge is TestEveryElementChecked's twin with
// Config.WholeVectorLarge: wherever the oversize element is, Send sends
// nothing of the vector (0 bytes, no error) and only the ENLARGE_REQ for the
// largest element, into the small ring; after the ack the whole vector goes
// over the larger buffer, in order, and no data ever went into the small
// ring. A vector with no oversize element still goes eagerly.
func TestWholeVectorLarge(t *testing.T) {
	fits := vectorCase{"none oversize", []int{10, 460, 30}, 500, 0, 0}
	for _, tc := range append(oversizeVectors, fits) {
		if tc.wantPhase != 0 {
			tc.wantN = 0 // promote first: nothing of the prefix goes
		}
		t.Run(tc.name, func(t *testing.T) {
			p, log, iov := tc.start(t, &Config{WholeVectorLarge: true})
			n := tc.wantN
			if tc.wantPhase == 0 {
				sendVector(t, p, vectorRest(iov, n))
				if reqs, _ := log.get(); len(reqs) != 0 || p.a.Stats().SendState != StateSmall {
					t.Fatalf("requests %v for a vector that fits", reqs)
				}
				return
			}
			if s := p.a.Stats(); s.SendState != StateRequested || s.ControlSent != 1 {
				t.Fatalf("after Send: state %v, control %d; want requested, 1", s.SendState, s.ControlSent)
			}
			// while the request is out, later calls send nothing either
			for i := 0; i < 3; i++ {
				if n, err := p.a.Send(iov); n != 0 || err != nil {
					t.Fatalf("Send while requested = %d, %v; want 0, nil", n, err)
				}
			}
			until(t, p, "the request", func() bool { r, _ := log.get(); return len(r) == 1 })
			sendVector(t, p, iov)
			reqs, small := log.get()
			if len(reqs) != 1 || reqs[0] != (Req{Phase: tc.wantPhase, Size: tc.wantSize}) {
				t.Errorf("requests %+v, want one {%d %d}", reqs, tc.wantPhase, tc.wantSize)
			}
			if small != 0 {
				t.Errorf("%d data writes into the small ring, want 0", small)
			}
			if s := p.a.Stats(); s.SendPhase != int(tc.wantPhase) || s.SendState != StateLarge {
				t.Errorf("sender at phase %d (%v), want %d large", s.SendPhase, s.SendState, tc.wantPhase)
			}
		})
	}
}

// TestWholeVectorLargeClimbsAgain: a vector that needs more than the phase a
// pending request asked for is not sent on that promotion: the sender
// requests the next step first, still sending nothing of it.
func TestWholeVectorLargeClimbsAgain(t *testing.T) {
	p := newPair(t, &Config{WholeVectorLarge: true})
	var log wireLog
	log.attach(p.fa, p.b.Endpoint().RingRKey)
	if n, err := p.a.Send([][]byte{payload(1000, 1)}); n != 0 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	until(t, p, "promotion to phase 1", func() bool { return p.b.Stats().RecvPhase == 1 })
	iov := [][]byte{payload(10, 2), payload(20000, 3)}
	until(t, p, "the second request", func() bool {
		n, err := p.a.Send(iov)
		if n != 0 || err != nil {
			t.Fatalf("Send = %d, %v; want 0, nil", n, err)
		}
		return p.a.Stats().ControlSent == 2
	})
	sendVector(t, p, iov)
	reqs, small := log.get()
	if len(reqs) != 2 || reqs[0] != (Req{Phase: 1, Size: 1000}) || reqs[1] != (Req{Phase: 2, Size: 20000}) {
		t.Errorf("requests %+v", reqs)
	}
	if got := p.fa.n(immData); got != 2 || small != 0 {
		t.Errorf("%d data writes (%d into the small ring), want the 2 elements over the 128 KiB buffer", got, small)
	}
}
