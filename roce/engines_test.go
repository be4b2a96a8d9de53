package roce_test

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// pipeQueues is a link.Splitter for tests: pipe links as the queues of one
// device. Only its parts carry frames (a device of as many engines as
// queues uses nothing else).
type pipeQueues struct{ parts []*pipe.Link }

var errWhole = errors.New("pipeQueues: use the parts")

func (q *pipeQueues) Queues() int { return len(q.parts) }
func (q *pipeQueues) Split(n int) ([]link.Link, error) {
	if n != len(q.parts) {
		return nil, errWhole
	}
	l := make([]link.Link, n)
	for i, p := range q.parts {
		l[i] = p
	}
	return l, nil
}
func (q *pipeQueues) Receive([][]byte) (int, error) { return 0, errWhole }
func (q *pipeQueues) Alloc([][]byte) int            { return 0 }
func (q *pipeQueues) Send([][]byte) error           { return errWhole }
func (q *pipeQueues) Free([][]byte)                 {}
func (q *pipeQueues) Wait(time.Duration) error      { return errWhole }
func (q *pipeQueues) Props() link.Props             { return q.parts[0].Props() }
func (q *pipeQueues) Wake() {
	for _, p := range q.parts {
		p.Wake()
	}
}
func (q *pipeQueues) Close() error {
	var errs []error
	for _, p := range q.parts {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// newEnginePair makes two devices of n engines, each over n pipes as its
// queues. Straight, queue i of one end is joined to queue i of the other
// (as veth keeps the queue index); crossed, to queue i+1 mod n, so every
// frame of a queue pair on engine i arrives at the other end's engine i+1.
func newEnginePair(t *testing.T, n int, crossed bool, o roce.Options) *devPair {
	t.Helper()
	qa := &pipeQueues{parts: make([]*pipe.Link, n)}
	qb := &pipeQueues{parts: make([]*pipe.Link, n)}
	for i := range n {
		la, lb, err := pipe.New(pipe.Config{})
		if err != nil {
			t.Fatal(err)
		}
		j := i
		if crossed {
			j = (i + 1) % n
		}
		qa.parts[i], qb.parts[j] = la, lb
	}
	open := func(l link.Link, ip netip.Addr) *roce.Device {
		o := o
		o.Addrs, o.Engines = []netip.Addr{ip}, n
		d, err := roce.NewDevice(l, &o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	return &devPair{a: open(qa, addrA), b: open(qb, addrB)}
}

// TestEnginesPipe: devices of two engines over two pipe queues run every RC
// operation, UD and a mixed load on eight queue pairs byte-exact. With the
// queues joined straight, no frame changes engines (connections settle on
// the same engine at both ends, UD queue pairs have equal QPNs); crossed,
// every one is handed over (and each queue pair's completions still come in
// order: runMixed checks them).
func TestEnginesPipe(t *testing.T) {
	for _, crossed := range []bool{false, true} {
		name := "straight"
		if crossed {
			name = "crossed"
		}
		t.Run(name, func(t *testing.T) {
			p := newEnginePair(t, 2, crossed, roce.Options{})
			total := int64(8 << 20)
			if testing.Short() || raceEnabled {
				total = 1 << 20
			}
			sa, sb := runEngineLoad(t, p, total, 8)
			switch {
			case !crossed && sa.Handoffs+sb.Handoffs != 0:
				t.Errorf("queues joined straight: %d + %d handoffs, want none", sa.Handoffs, sb.Handoffs)
			case crossed && (sa.Handoffs == 0 || sb.Handoffs == 0):
				t.Errorf("queues crossed: %d + %d handoffs, want frames handed over at both ends", sa.Handoffs, sb.Handoffs)
			}
			if sa.DropUnknownQPN+sb.DropUnknownQPN != 0 {
				t.Errorf("frames for unknown queue pairs: %d + %d", sa.DropUnknownQPN, sb.DropUnknownQPN)
			}
		})
	}
}

// runEngineLoad runs UD, then every RC operation and a mixed load of total
// bytes on nQP queue pairs between p's devices, and returns their
// counters. Before the RC part it makes b's QPNs one ahead of a's
// (skipQPN): each connection's queue pairs start on different engines and
// settle on the same one (engine min(QPNs) mod 2, both engines in turn),
// while the UD queue pairs, which stay on engine QPN mod 2, have equal
// QPNs at both ends.
func runEngineLoad(t *testing.T, p *devPair, total int64, nQP int) (sa, sb roce.Stats) {
	t.Helper()
	runUD(t, p)
	skipQPN(t, p.b)
	runOperations(t, p)
	runMixed(t, p, total, nQP)
	sa, sb = p.a.Stats(), p.b.Stats()
	t.Logf("handoffs %d + %d (stalls %d + %d) of %d + %d frames", sa.Handoffs, sb.Handoffs,
		sa.HandoffStalls, sb.HandoffStalls, sa.RxFrames, sb.RxFrames)
	return sa, sb
}

// TestEnginesSettle: with b's QPNs one ahead of a's (a queue pair made on
// b first), each connection's queue pairs start on different engines (QPN
// mod 2) but move when they connect to engine min(local, remote QPN) mod 2,
// the same at both ends: over straight queues no RC frame changes engines.
func TestEnginesSettle(t *testing.T) {
	p := newEnginePair(t, 2, false, roce.Options{})
	skipQPN(t, p.b)
	runOperations(t, p)
	runMixed(t, p, 2<<20, 4)
	sa, sb := p.a.Stats(), p.b.Stats()
	if sa.Handoffs+sb.Handoffs != 0 {
		t.Errorf("connected queue pairs: %d + %d handoffs, want none", sa.Handoffs, sb.Handoffs)
	}
}

// skipQPN makes a queue pair on d, so that d's next QPNs are one ahead.
func skipQPN(t *testing.T, d *roce.Device) {
	t.Helper()
	cq, err := d.CreateCQ(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.AllocPD().CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq}); err != nil {
		t.Fatal(err)
	}
}

// TestEnginesFullInbox: with inboxes of 8 frames and queues crossed, the
// receiving engines find them full and hold the rest of their batch until
// the owner made room: a mixed load on four queue pairs still lands
// byte-exact, and no unicast frame is dropped at a handoff (frames the pipe
// drops while an engine reads none from it are resent, as on any link).
func TestEnginesFullInbox(t *testing.T) {
	defer roce.SetHandSlots(roce.SetHandSlots(8))
	p := newEnginePair(t, 2, true, roce.Options{RxBatch: 2})
	runMixed(t, p, 4<<20, 4)
	sa, sb := p.a.Stats(), p.b.Stats()
	t.Logf("handoffs %d + %d, stalls %d + %d, retransmits %d + %d", sa.Handoffs, sb.Handoffs,
		sa.HandoffStalls, sb.HandoffStalls, sa.Retransmits, sb.Retransmits)
	if sa.HandoffStalls+sb.HandoffStalls == 0 {
		t.Errorf("inboxes of 8 frames never full")
	}
	if sa.HandoffDrops+sb.HandoffDrops != 0 {
		t.Errorf("unicast frames dropped at handoff: %d + %d", sa.HandoffDrops, sb.HandoffDrops)
	}
}

// TestEnginesRefused: more engines than the link has queues, or on a link
// of one queue, or with a capture, is an error that says why.
func TestEnginesRefused(t *testing.T) {
	la, _, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	if _, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{addrA}, Engines: 2}); err == nil || !strings.Contains(err.Error(), "has one queue") {
		t.Errorf("2 engines on a pipe: %v", err)
	}
	q := &pipeQueues{parts: make([]*pipe.Link, 2)}
	for i := range q.parts {
		if q.parts[i], _, err = pipe.New(pipe.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	defer q.Close()
	if _, err := roce.NewDevice(q, &roce.Options{Addrs: []netip.Addr{addrA}, Engines: 3}); err == nil || !strings.Contains(err.Error(), "has 2 queues") {
		t.Errorf("3 engines on 2 queues: %v", err)
	}
	var sb strings.Builder
	if _, err := roce.NewDevice(q, &roce.Options{Addrs: []netip.Addr{addrA}, Engines: 2, Capture: &sb}); err == nil || !strings.Contains(err.Error(), "capture") {
		t.Errorf("2 engines with a capture: %v", err)
	}
}

// TestEnginesMulticast: a UD SEND to a group reaches the group's queue
// pairs on both engines of the receiving device, whichever engine the frame
// arrives on: that engine delivers to its own and hands it to the other,
// once. Four receivers, two per engine (QPNs of both parities).
func TestEnginesMulticast(t *testing.T) {
	p := newEnginePair(t, 2, false, roce.Options{})
	const qkey = 0x77
	group := roce.GIDFromIP(netip.MustParseAddr("239.1.2.3"))
	var rs []*side
	for range 4 {
		s := newSide(t, p.b, roce.UD, connCfg{}, 0)
		if err := s.qp.Activate(qkey, 0x100); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.AttachMcast(group); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, s)
	}
	// Two senders, one on each engine of a (QPN parity), so the group's
	// frames arrive on both engines of b.
	for i := range 2 {
		x := newSide(t, p.a, roce.UD, connCfg{}, 0)
		if err := x.qp.Activate(qkey, 0x100); err != nil {
			t.Fatal(err)
		}
		ah, err := p.a.CreateAH(group, roce.MulticastQPN, qkey)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rs {
			if err := s.qp.PostRecv(roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{s.sge(0, 2048)}}); err != nil {
				t.Fatal(err)
			}
		}
		fill(x.buf[:300], byte(i+1))
		if err := x.qp.PostSendAH(roce.SendWR{ID: 9, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: []roce.SGE{x.sge(0, 300)}}, ah); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, x.scq); wc.Status != roce.WCSuccess {
			t.Fatalf("sender %d (QPN %#x): %+v", i, x.qp.QPN(), wc)
		}
		for j, s := range rs {
			wc := waitWC(t, s.rcq)
			if wc.Status != roce.WCSuccess || wc.ID != uint64(i) || wc.ByteLen != 340 || !bytes.Equal(s.buf[40:340], x.buf[:300]) {
				t.Fatalf("sender %d (QPN %#x), receiver %d (QPN %#x): %+v", i, x.qp.QPN(), j, s.qp.QPN(), wc)
			}
			noWC(t, s.rcq, 0)
		}
	}
	// The engines publish their counters at the end of a round, which can
	// come after the completions it made were read: wait for them (a
	// bound, not a figure), then look for a handoff too many.
	st := p.b.Stats()
	for deadline := time.Now().Add(2 * time.Second); st.Handoffs < 2 && time.Now().Before(deadline); st = p.b.Stats() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	st = p.b.Stats()
	t.Logf("b: %d frames, %d handoffs", st.RxFrames, st.Handoffs)
	if st.Handoffs != 2 {
		t.Errorf("%d handoffs, want 2 (each group frame handed once to the other engine)", st.Handoffs)
	}
}
