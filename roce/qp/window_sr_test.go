package qp

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/xdproce/xdproce/roce/wire"
)

// sackBits is an SR_SACK bitmap with the given offsets past the base set
// (offset 1: base+1).
func sackBits(offs ...int) []byte {
	b := make([]byte, 32)
	for _, o := range offs {
		b[(o-1)/8] |= 1 << ((o - 1) % 8)
	}
	return b
}

// psnRange is the PSNs from..to-1.
func psnRange(from, to uint32) []uint32 {
	var r []uint32
	for p := from; p != to; p++ {
		r = append(r, p)
	}
	return r
}

// TestSRWindow drives the selective-repeat scoreboard as the completer and
// requester do: the PSNs the requester would resend after each step.
func TestSRWindow(t *testing.T) {
	type step struct {
		sack   bool // a SACK with base and held (offsets past base)
		base   uint32
		held   []int
		ack    uint32 // advance unacked to this PSN (0: no)
		lost   bool   // a timer fired
		send   uint32 // new PSNs sent before the resends (window max grows)
		at     int64  // the time of the step (0: 1000)
		rtt    int64  // the smoothed round trip then
		resend []uint32
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"one hole", []step{{sack: true, base: 100, held: []int{1, 2, 3}, resend: []uint32{100}}}},
		{"holes", []step{{sack: true, base: 100, held: []int{2, 5}, resend: []uint32{100, 101, 103, 104}}}},
		{"duplicate SACK resends nothing", []step{
			{sack: true, base: 100, held: []int{1}, resend: []uint32{100}},
			{sack: true, base: 100, held: []int{1}, resend: nil},
		}},
		{"a resend lost again", []step{
			{sack: true, base: 100, held: []int{1}, resend: []uint32{100}},
			// sent after the resend: 164 SACKed shows the resend of 100 lost
			{send: 20, sack: true, base: 100, held: []int{1, 64}, resend: append([]uint32{100}, psnRange(102, 164)...)},
		}},
		// The window is full (nothing new): the resend of 102 arrived, so
		// the resend of 100 before it was lost, and so were 104..163, sent
		// before it and not held.
		{"a later resend shows an earlier one lost", []step{
			{sack: true, base: 100, held: []int{1, 3}, resend: []uint32{100, 102}},
			{sack: true, base: 100, held: []int{1, 2, 3}, resend: append([]uint32{100}, psnRange(104, 164)...)},
		}},
		{"timeout: everything not held", []step{
			{sack: true, base: 100, held: []int{1, 3}, resend: []uint32{100, 102}},
			{lost: true, resend: append([]uint32{100, 102}, psnRange(104, 164)...)},
		}},
		{"all holes filled", []step{
			{sack: true, base: 100, held: []int{2, 4}, resend: []uint32{100, 101, 103}},
			// An ACK with nothing held: the resend of 103 arrived, so
			// 105..163, sent before it, did not.
			{ack: 105, resend: psnRange(105, 164)},
			{ack: 110, sack: true, base: 110, held: []int{1}, resend: []uint32{110}},
		}},
		// 100 resent at 1000; the ACK of it 200 ns later, sooner than half
		// the round trip (srtt 500; no minimum sampled), answers the
		// original (reordered): nothing sent before the resend is presumed
		// lost. 600 ns later it is the resend's, and 102..163 sent before
		// it did not arrive.
		{"a late original is not the resend", []step{
			{sack: true, base: 100, held: []int{1}, resend: []uint32{100}},
			{at: 1200, rtt: 500, ack: 102, resend: nil},
		}},
		// The same early answer to a resend whose earlier copy went 99 µs
		// before it, long past the 20 µs that copy may be late by (the
		// fast timeout's floor), is the resend's: that copy was lost.
		{"an old copy's resend answered early", []step{
			{at: 100_000, sack: true, base: 100, held: []int{1}, resend: []uint32{100}},
			{at: 100_200, rtt: 500, ack: 102, resend: psnRange(102, 164)},
		}},
		// The responder SACKed 101..103, then dropped 101 (a SEND whose
		// receive WQE was missing when its turn came; the RNR NAK lost):
		// its SACK with base 101 takes 101 back, and a timeout resends the
		// oldest PSN even while it is marked held.
		{"a SACK's base held is lost", []step{
			{sack: true, base: 100, held: []int{1, 2, 3}, resend: []uint32{100}},
			{ack: 101, sack: true, base: 101, resend: append([]uint32{101}, psnRange(104, 164)...)},
		}},
		{"a timeout resends the oldest even if held", []step{
			{sack: true, base: 100, held: []int{1}, resend: []uint32{100}},
			{ack: 101, lost: true, resend: psnRange(101, 164)},
		}},
		{"a resend answered after a round trip", []step{
			{sack: true, base: 100, held: []int{1}, resend: []uint32{100}},
			{at: 1600, rtt: 500, ack: 102, resend: psnRange(102, 164)},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w sendWindow
			w.start(100, 1024, false)
			w.sr.enable(true, &w, 0)
			if w.limit != srLegacyWindow || w.cwnd > srLegacyWindow {
				t.Fatalf("window limit %d cwnd %d, want at most %d", w.limit, w.cwnd, srLegacyWindow)
			}
			max := uint32(100)
			send := func(n uint32) {
				for range n {
					w.sent(max, max+1, false, 0, 1000)
					max++
				}
			}
			send(64)
			for i, s := range c.steps {
				send(s.send)
				now := cmp.Or(s.at, 1000)
				w.srtt = s.rtt
				if s.ack != 0 {
					w.advance(s.ack, now)
				}
				if s.sack {
					w.sr.sack(s.base, sackBits(s.held...), w.max, now, ambiguity{resend: s.rtt, prior: fastMinRTO})
				}
				if s.lost {
					w.sr.lostAll(w.una, w.max)
				}
				var got []uint32
				for {
					psn, ok := w.sr.nextHole(w.una, w.max)
					if !ok {
						break
					}
					got = append(got, psn)
					w.sent(psn, psn+1, false, 0, now)
				}
				if !slices.Equal(got, s.resend) {
					t.Fatalf("step %d: resends %v, want %v", i, got, s.resend)
				}
			}
		})
	}
}

// TestSRWindowOff: without selective repeat the scoreboard names nothing
// and the window is not capped.
func TestSRWindowOff(t *testing.T) {
	var w sendWindow
	w.start(100, 1024, true)
	w.sr.enable(false, &w, 0)
	w.sent(100, 101, true, 0, 1)
	w.sr.sack(100, sackBits(1), 101, 1, ambiguity{})
	if _, ok := w.sr.nextHole(100, 101); ok || w.limit != 1024 {
		t.Fatalf("go-back-N window: a hole named, or limit %d", w.limit)
	}
}

// TestSRSackBitmap: the responder holds random PSNs up to srSlots past the
// expected one (across the 24-bit wrap); its SACK bitmap is the shortest
// multiple of 32 bytes that covers the highest held, names exactly the
// held PSNs, and the requester's scoreboard reading it marks exactly those
// (the ones sent) and presumes missing what is before the highest held.
func TestSRSackBitmap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h srHold
	h.enable(true)
	buf := make([]byte, wire.SACKMaxLen)
	for iter := range 500 {
		epsn := wire.PSNAdd(wire.PSNMask-1000, uint32(rng.IntN(3000)))
		h.reset()
		want := map[uint32]bool{}
		span := 1 + rng.IntN(srSlots)
		for range rng.IntN(span) + 1 {
			d := 1 + rng.IntN(span)
			psn := wire.PSNAdd(epsn, uint32(d))
			if d >= srSlots || want[psn] {
				continue
			}
			p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteMiddle, PSN: psn}, Payload: []byte{byte(d)}}
			h.put(&p, 1024)
			want[psn] = true
		}
		top := 0
		for psn := range want {
			top = max(top, int(wire.PSNDiff(psn, epsn)))
		}
		n := h.bitmap(buf, epsn)
		if wantN := max(1, (top+255)/256) * wire.SACKLen; n != wantN {
			t.Fatalf("iter %d: bitmap of %d bytes with the highest held %d past, want %d", iter, n, top, wantN)
		}
		for j := range 8 * n {
			psn := wire.PSNAdd(epsn, uint32(j+1))
			if got := buf[j/8]&(1<<(j%8)) != 0; got != want[psn] || got != h.has(psn) {
				t.Fatalf("iter %d: bit %d (PSN %#x) is %v, held %v", iter, j, psn, got, want[psn])
			}
		}
		// The requester sent everything up to sent (maybe less than held:
		// those bits must be ignored).
		var w sendWindow
		w.start(epsn, srSlots, true)
		w.sr.enable(true, &w, srSlots)
		sent := wire.PSNAdd(epsn, uint32(1+rng.IntN(srSlots)))
		w.max, w.anySent = sent, true
		w.sr.sack(epsn, buf[:n], sent, 1, ambiguity{})
		for psn := epsn; psn != sent; psn = wire.PSNAdd(psn, 1) {
			held := want[psn]
			if bit(w.sr.sacked, psn) != held {
				t.Fatalf("iter %d: scoreboard says PSN %#x held %v, want %v", iter, psn, !held, held)
			}
		}
		for psn := range want {
			s := h.take(psn)
			if s.p.BTH.PSN != psn || len(s.p.Payload) != 1 || s.p.Payload[0] != byte(wire.PSNDiff(psn, epsn)) {
				t.Fatalf("iter %d: slot for %#x holds %+v", iter, psn, s.p.BTH)
			}
			h.release(s)
		}
		if h.n != 0 || len(h.free) > srSlots {
			t.Fatalf("iter %d: %d still held, %d free slots", iter, h.n, len(h.free))
		}
	}
}

// TestSRTimeoutHalves: with selective repeat a local ACK timeout halves the
// window (again at the next one, not below the floor) and keeps ssthresh,
// so progress slow-starts back to the window before; a fast timer firing
// (a probe) leaves it alone.
func TestSRTimeoutHalves(t *testing.T) {
	var w sendWindow
	w.start(100, 1024, false)
	w.sr.enable(true, &w, SRHold)
	w.setTimeout(67e6)
	w.cwnd = 1024
	w.srtt, w.minRTT = 1e6, 1e6
	for psn := uint32(100); psn < 1124; psn++ {
		w.sent(psn, psn+1, psn%64 == 0, 0, 0)
	}
	if fast, _ := w.expired(w.fastDeadline); !fast || w.cwnd != 1024 {
		t.Fatalf("fast timer: fired %v, window %d; want fired, 1024", fast, w.cwnd)
	}
	for i, want := range []uint32{512, 256} {
		if _, timeout := w.expired(w.deadline); !timeout || w.cwnd != want || w.ssthresh != 1024 {
			t.Fatalf("timeout %d: fired %v, window %d ssthresh %d; want %d, 1024", i, timeout, w.cwnd, w.ssthresh, want)
		}
	}
	w.advance(400, w.deadline)
	w.acked(100, w.deadline)
	if w.cwnd != 556 {
		t.Fatalf("after 300 PSNs acknowledged the window is %d, want 556 (slow start from 256)", w.cwnd)
	}
}

// TestSRCNPHalves (issue 20's incast): with selective repeat and DCQCN a
// CNP halves the window, at most once per round trip and not below
// cnpWindowMin, and progress then grows it by one PSN per window; without
// selective repeat, or without DCQCN, a CNP leaves the window alone.
func TestSRCNPHalves(t *testing.T) {
	for _, tc := range []struct {
		sr, dcqcn bool
		want      []uint32 // the window after each CNP
	}{
		{true, true, []uint32{512, 512, 256, 128, 64, 32, 32, 32}},
		{false, true, []uint32{1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024}},
		{true, false, []uint32{1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024}},
	} {
		var w sendWindow
		w.start(100, 1024, false)
		w.sr.enable(tc.sr, &w, SRHold)
		w.pace.enable(tc.dcqcn, DCQCNParams{}, 0)
		w.cwnd = 1024
		w.srtt = 1e6
		now := int64(1e6)
		for i, want := range tc.want {
			w.cnp(now)
			if w.cwnd != want {
				t.Fatalf("sr %v dcqcn %v: after CNP %d the window is %d, want %d", tc.sr, tc.dcqcn, i, w.cwnd, want)
			}
			if i == 0 {
				now += 1e6 - 1 // the second CNP comes within the round trip
			} else {
				now += 1e6
			}
		}
		if !tc.sr || !tc.dcqcn {
			continue
		}
		w.cwnd, w.ssthresh = 64, 64
		for psn := uint32(100); psn < 228; psn++ {
			w.sent(psn, psn+1, false, 0, now)
		}
		w.advance(228, now)
		w.acked(100, now)
		if w.cwnd != 65 {
			t.Fatalf("after 128 PSNs acknowledged at window 64 the window is %d, want 65 (one per window)", w.cwnd)
		}
	}
}

// TestSRNoAllocs: once the hold buffer has its slots, holding, SACKing and
// draining requests allocate nothing, and neither do the scoreboard's
// per-packet steps (numbering a transmission, reading a SACK, judging,
// finding the holes, acknowledging).
func TestSRNoAllocs(t *testing.T) {
	var h srHold
	h.enable(true)
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteMiddle}, Payload: make([]byte, 1024)}
	buf := make([]byte, wire.SACKMaxLen)
	epsn := uint32(wire.PSNMask - 100)
	hold := func() {
		for d := uint32(1); d <= 200; d++ {
			p.BTH.PSN = wire.PSNAdd(epsn, d)
			h.put(&p, 1024)
		}
		h.bitmap(buf, epsn)
		for d := uint32(1); d <= 200; d++ {
			h.release(h.take(wire.PSNAdd(epsn, d)))
		}
		epsn = wire.PSNAdd(epsn, 201)
	}
	hold() // the slots are made
	if a := testing.AllocsPerRun(50, hold); a != 0 {
		t.Errorf("hold buffer: %.1f allocations per 200 requests held", a)
	}
	var w sendWindow
	w.start(100, 1024, false)
	w.sr.enable(true, &w, SRHold)
	w.cwnd = 1024
	now := int64(1)
	board := func() {
		una := w.una
		for i := range uint32(256) {
			w.sent(wire.PSNAdd(una, i), wire.PSNAdd(una, i+1), i%64 == 63, 1000, now)
		}
		clear(buf[:64])
		for j := 1; j < 255; j++ { // una missing, the rest held
			buf[(j-1)/8] |= 1 << ((j - 1) % 8)
		}
		w.sr.sack(una, buf[:64], w.max, now, w.ambig())
		for {
			psn, ok := w.sr.nextHole(w.una, w.max)
			if !ok {
				break
			}
			w.sent(psn, psn+1, false, 1000, now)
		}
		w.advance(w.max, now)
		now += 1000
	}
	board()
	if a := testing.AllocsPerRun(50, board); a != 0 {
		t.Errorf("scoreboard: %.1f allocations per 256 packets", a)
	}
}
