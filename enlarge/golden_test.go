package enlarge

import (
	"bytes"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/internal/pcaptest"
	"github.com/xdproce/xdproce/roce/wire"
)

var update = flag.Bool("update", false, "rewrite the golden captures testdata/pcaps/enlarge-*.pcapng")

const goldenDir = "../testdata/pcaps"

// wframe is one decoded frame of a lab run.
type wframe struct {
	fromA bool
	p     wire.Packet
}

func (f *wframe) kind() uint32 { return f.p.ImmDt >> immKindShift }

// control reports whether f is a control message of the given kind.
func (f *wframe) control(kind uint32) bool {
	return f.p.BTH.Opcode == wire.RCWriteOnlyImm && f.kind() == kind
}

// data reports whether f carries message data into a ring (any WRITE that is
// not a control message).
func (f *wframe) data() bool {
	switch f.p.BTH.Opcode {
	case wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteLastImm, wire.RCWriteOnly:
		return true
	case wire.RCWriteOnlyImm:
		return f.kind() == immData || f.kind() == immMore
	}
	return false
}

func decodeLab(t *testing.T, l *lab) []wframe {
	t.Helper()
	out := make([]wframe, len(l.frames))
	for i, f := range l.frames {
		out[i].fromA = f.fromA
		if err := out[i].p.Decode(f.data); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	return out
}

// checkGolden compares the lab's capture with the file, or writes it.
func checkGolden(t *testing.T, l *lab, name string) {
	t.Helper()
	if err := l.cw.Flush(); err != nil {
		t.Fatal(err)
	}
	got := l.pcap.Bytes()
	path := filepath.Join(goldenDir, name+".pcapng")
	pcaptest.Golden(t, path, got, *update, "./enlarge")
}

func wantDump(t *testing.T, recs []*capture.Record, want ...string) {
	t.Helper()
	var all []string
	for _, r := range recs {
		if r.Payload != "" {
			all = append(all, r.Payload)
		}
	}
	for _, w := range want {
		found := false
		for _, s := range all {
			found = found || strings.HasPrefix(s, w)
		}
		if !found {
			t.Errorf("dump has no %q; payload descriptions: %q", w, all)
		}
	}
}

// promotionChecks asserts a request/ack/data exchange starting at frame i and
// returns the index after the ack.
func promotionChecks(t *testing.T, fr []wframe, l *lab, from int, req Req, ringAddr uint64, ringRKey uint32) (int, Ack) {
	t.Helper()
	ri, ai := -1, -1
	for i := from; i < len(fr); i++ {
		if ri < 0 && fr[i].fromA && fr[i].control(immReq) {
			ri = i
		}
		if ai < 0 && !fr[i].fromA && fr[i].control(immAck) {
			ai = i
			break
		}
	}
	if ri < 0 || ai < 0 || ai < ri {
		t.Fatalf("no request then ack from frame %d (req %d, ack %d)", from, ri, ai)
	}
	f := &fr[ri]
	got, ok := ParseReq(f.p.Payload)
	if !ok || got != req {
		t.Errorf("frame %d: ENLARGE_REQ %+v (ok %v), want %+v", ri, got, ok, req)
	}
	if f.p.RETH.RKey != ringRKey || f.p.RETH.VA < ringAddr || f.p.RETH.DMALen != ReqLen {
		t.Errorf("frame %d: request written to %#x/%#x len %d, want the current ring at %#x/%#x", ri,
			f.p.RETH.VA, f.p.RETH.RKey, f.p.RETH.DMALen, ringAddr, ringRKey)
	}
	for i := ri + 1; i < ai; i++ {
		if fr[i].fromA && fr[i].p.BTH.Opcode != wire.RCAck {
			t.Errorf("frame %d: %v from the sender between request and ack", i, fr[i].p.BTH.Opcode)
		}
	}
	a := &fr[ai]
	ack, ok := ParseAck(a.p.Payload)
	wantLen := DefaultLadder[req.Phase]
	if req.Phase == 0 { // the grown ring
		wantLen = DefaultGrowSlots * DefaultSmall
	}
	if !ok || ack.Phase != req.Phase || int(ack.Length) != wantLen || ack.RKey == 0 {
		t.Fatalf("frame %d: ENLARGE_ACK %+v (ok %v), want phase %d", ai, ack, ok, req.Phase)
	}
	if a.p.RETH.VA != l.a.ch.mb.Addr()+mbAck || a.p.RETH.RKey != l.a.ch.mb.RKey() || a.p.RETH.DMALen != AckLen {
		t.Errorf("frame %d: ack written to %#x/%#x, want a's mailbox %#x/%#x", ai, a.p.RETH.VA, a.p.RETH.RKey,
			l.a.ch.mb.Addr(), l.a.ch.mb.RKey())
	}
	return ai + 1, ack
}

// dataChecks asserts that the next data message from a after frame from goes
// to the acked buffer with the right length and returns the index after it.
func dataChecks(t *testing.T, fr []wframe, from int, ack Ack, n int) int {
	t.Helper()
	first := -1
	for i := from; i < len(fr); i++ {
		if fr[i].fromA && fr[i].data() {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatalf("no data after frame %d", from)
	}
	f := &fr[first]
	if f.p.RETH.VA != ack.Addr || f.p.RETH.RKey != ack.RKey || int(f.p.RETH.DMALen) != min(n, DefaultLadder[ack.Phase]) {
		t.Errorf("frame %d: data to %#x/%#x len %d, want %#x/%#x len %d", first, f.p.RETH.VA, f.p.RETH.RKey,
			f.p.RETH.DMALen, ack.Addr, ack.RKey, n)
	}
	for i := first; i < len(fr); i++ {
		if !fr[i].fromA || !fr[i].data() {
			continue
		}
		if fr[i].p.BTH.Opcode == wire.RCWriteLastImm || fr[i].p.BTH.Opcode == wire.RCWriteOnlyImm {
			if fr[i].p.ImmDt != makeImm(immData, min(n, DefaultLadder[ack.Phase])) {
				t.Errorf("frame %d: immediate %#x", i, fr[i].p.ImmDt)
			}
			return i + 1
		}
	}
	t.Fatal("data message does not end")
	return 0
}

func TestGoldenEager(t *testing.T) {
	l := newLab(t, nil, true)
	msg := payload(100, 1)
	l.send(l.a, msg)
	if got := l.recv(l.b, 1000); !bytes.Equal(got, msg) {
		t.Fatal("message damaged")
	}
	checkGolden(t, l, "enlarge-eager")
	fr := decodeLab(t, l)
	if len(fr) != 2 || fr[0].p.BTH.Opcode != wire.RCWriteOnlyImm || fr[1].p.BTH.Opcode != wire.RCAck {
		t.Fatalf("frames %v, want WRITE_ONLY_WITH_IMMEDIATE then ACK", fr)
	}
	ep := l.b.ch.Endpoint()
	f := fr[0].p
	if f.RETH.VA != ep.RingAddr || f.RETH.RKey != ep.RingRKey || f.RETH.DMALen != 100 ||
		f.ImmDt != makeImm(immData, 100) || !bytes.Equal(f.Payload, msg) {
		t.Errorf("eager write: RETH %+v imm %#x", f.RETH, f.ImmDt)
	}
	if s, ok := DescribePacket(&f); ok {
		t.Errorf("data described as control: %q", s)
	}
}

func TestGoldenPromotion512To8K(t *testing.T) {
	l := newLab(t, nil, true)
	ep := l.b.ch.Endpoint()
	l.transfer(payload(5000, 2))
	checkGolden(t, l, "enlarge-promote-8k")
	fr := decodeLab(t, l)
	next, ack := promotionChecks(t, fr, l, 0, Req{Phase: 1, Size: 5000}, ep.RingAddr, ep.RingRKey)
	if ack.Addr != l.b.ch.rx.ring.Addr() || ack.RKey != l.b.ch.rx.ring.RKey() {
		t.Errorf("ack names %#x/%#x, receiver's buffer is %#x/%#x", ack.Addr, ack.RKey, l.b.ch.rx.ring.Addr(), l.b.ch.rx.ring.RKey())
	}
	dataChecks(t, fr, next, ack, 5000)
	wantDump(t, pcaptest.Describe(t, l.pcap.Bytes()), "ENLARGE_REQ phase=1 size=5000",
		"ENLARGE_ACK addr=0x", "ENLARGE_CREDIT phase=1 consumed=1")
}

func TestGoldenThreePhases(t *testing.T) {
	l := newLab(t, nil, true)
	ep := l.b.ch.Endpoint()
	l.transfer(payload(1000, 3))
	l.transfer(payload(20000, 4))
	checkGolden(t, l, "enlarge-three-phase")
	fr := decodeLab(t, l)
	next, ack1 := promotionChecks(t, fr, l, 0, Req{Phase: 1, Size: 1000}, ep.RingAddr, ep.RingRKey)
	next = dataChecks(t, fr, next, ack1, 1000)
	next, ack2 := promotionChecks(t, fr, l, next, Req{Phase: 2, Size: 20000}, ack1.Addr, ack1.RKey)
	dataChecks(t, fr, next, ack2, 20000)
	if ack2.Length != 128<<10 || ack1.Length != 8<<10 {
		t.Errorf("ack lengths %d, %d", ack1.Length, ack2.Length)
	}
	wantDump(t, pcaptest.Describe(t, l.pcap.Bytes()), "ENLARGE_REQ phase=1 size=1000", "ENLARGE_REQ phase=2 size=20000",
		"ENLARGE_ACK addr=0x", "ENLARGE_ACK addr=0x")
}

func TestGoldenAckTimesOut(t *testing.T) {
	l := newLab(t, &Config{TailTimeout: 50e3}, true)
	l.b.ch.setAckHook(func(a []byte) { clear(a[28:32]) }) // the tail never comes
	ep := l.b.ch.Endpoint()
	big := payload(5000, 5)
	for i := 0; i < 4; i++ {
		if n, err := l.a.ch.Send([][]byte{big}); n != 0 || err != nil {
			t.Fatalf("call %d: Send = %d, %v; want 0, nil", i, n, err)
		}
		l.settle()
	}
	checkGolden(t, l, "enlarge-ack-timeout")
	fr := decodeLab(t, l)
	var reqs, acks int
	for i := range fr {
		f := &fr[i]
		switch {
		case f.fromA && f.control(immReq):
			reqs++
			if r, ok := ParseReq(f.p.Payload); !ok || r != (Req{Phase: 1, Size: 5000}) || f.p.RETH.VA != ep.RingAddr {
				t.Errorf("frame %d: request %+v", i, r)
			}
		case !f.fromA && f.control(immAck):
			acks++
			if _, ok := ParseAck(f.p.Payload); ok {
				t.Errorf("frame %d: the ack has its tail", i)
			}
			if !headOK(f.p.Payload, TypeAck) {
				t.Errorf("frame %d: the ack has no head", i)
			}
		case f.fromA && f.data():
			t.Errorf("frame %d: data sent without a complete ack", i)
		}
	}
	if reqs != 1 || acks != 1 {
		t.Errorf("%d requests and %d acks, want 1 and 1", reqs, acks)
	}
	wantDump(t, pcaptest.Describe(t, l.pcap.Bytes()), "ENLARGE_REQ phase=1 size=5000", "ENLARGE_ACK (incomplete: no tail)")
}

// TestGoldenWholeVector: with Config.WholeVectorLarge a vector of 100 B,
// 600 B and 200 B (the middle element over the 460 B threshold of the 512 B
// ring) goes whole over the 8 KiB buffer: the first frame of the channel is
// the ENLARGE_REQ for 600 B, in the small ring; after the ENLARGE_ACK come
// the three elements in order, each a WRITE_WITH_IMM into the acked buffer,
// and no data ever goes into the small ring.
func TestGoldenWholeVector(t *testing.T) {
	l := newLab(t, &Config{WholeVectorLarge: true}, true)
	ep := l.b.ch.Endpoint()
	iov := [][]byte{payload(100, 6), payload(600, 7), payload(200, 8)}
	// one slot in the 8 KiB buffer: b reads each element before the next goes
	rest, got, n := iov, 0, 0
	buf := make([]byte, 1000)
	for i := 0; got < len(iov) && i < 100; i++ {
		if len(rest) > 0 {
			k, err := l.a.ch.Send(rest)
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			if i == 0 && k != 0 {
				t.Fatalf("first Send = %d, want 0 (promote first)", k)
			}
			rest = vectorRest(rest, k)
		}
		l.settle()
		k, end, err := l.b.ch.Recv(buf[n:])
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if n += k; end {
			if !bytes.Equal(buf[:n], iov[got]) {
				t.Fatalf("element %d damaged", got)
			}
			got, n = got+1, 0
		}
		l.settle()
	}
	if got != len(iov) {
		t.Fatalf("%d of %d elements arrived", got, len(iov))
	}
	checkGolden(t, l, "enlarge-whole-vector")
	fr := decodeLab(t, l)
	if len(fr) == 0 || !fr[0].fromA || !fr[0].control(immReq) {
		t.Fatalf("first frame is not the ENLARGE_REQ: %+v", fr[0].p.BTH)
	}
	next, ack := promotionChecks(t, fr, l, 0, Req{Phase: 1, Size: 600}, ep.RingAddr, ep.RingRKey)
	for i := 0; i < next; i++ {
		if fr[i].fromA && fr[i].data() {
			t.Errorf("frame %d: data before the ack", i)
		}
	}
	var sizes []int
	for i := next; i < len(fr); i++ {
		f := &fr[i]
		if !f.fromA || !f.data() {
			continue
		}
		if f.p.RETH.VA != ack.Addr || f.p.RETH.RKey != ack.RKey || f.p.BTH.Opcode != wire.RCWriteOnlyImm {
			t.Errorf("frame %d: %v to %#x/%#x, want WRITE_ONLY_WITH_IMMEDIATE into %#x/%#x", i, f.p.BTH.Opcode,
				f.p.RETH.VA, f.p.RETH.RKey, ack.Addr, ack.RKey)
		}
		if !bytes.Equal(f.p.Payload, iov[len(sizes)%len(iov)]) {
			t.Errorf("frame %d: payload is not element %d", i, len(sizes))
		}
		sizes = append(sizes, int(f.p.RETH.DMALen))
	}
	if len(sizes) != 3 || sizes[0] != 100 || sizes[1] != 600 || sizes[2] != 200 {
		t.Errorf("data writes of %v B, want [100 600 200]", sizes)
	}
	wantDump(t, pcaptest.Describe(t, l.pcap.Bytes()), "ENLARGE_REQ phase=1 size=600", "ENLARGE_ACK addr=0x", "ENLARGE_CREDIT phase=1 consumed=1")
}

// TestGoldenRingGrows: six 100-byte messages in one Send on a fresh
// channel. Three go eagerly into the 4-slot ring, an ENLARGE_REQ for phase 0
// into its last slot, the ENLARGE_ACK names the receiver's grown ring (16 ×
// 512 B, still phase 0), and the other three go into slots 0–2 of the grown
// ring; nothing from the sender between request and ack.
func TestGoldenRingGrows(t *testing.T) {
	l := newLab(t, nil, true)
	ep := l.b.ch.Endpoint()
	msgs := make([][]byte, 6)
	for i := range msgs {
		msgs[i] = payload(100, int64(10+i))
	}
	sent := 0
	for range 100 {
		k, err := l.a.ch.Send(msgs[sent/100:])
		if err != nil {
			t.Fatal(err)
		}
		if sent == 0 && k != 300 {
			t.Fatalf("first Send sent %d B, want 300 (three messages, then the request in the last slot)", k)
		}
		sent += k
		l.settle()
		if sent == 600 {
			break
		}
	}
	for i, m := range msgs {
		if got := l.recv(l.b, 1000); !bytes.Equal(got, m) {
			t.Fatalf("message %d damaged", i)
		}
	}
	checkGolden(t, l, "enlarge-ring-grows")
	fr := decodeLab(t, l)
	var data []*wframe
	for i := range fr {
		if fr[i].fromA && fr[i].data() {
			data = append(data, &fr[i])
		}
	}
	if len(data) != 6 {
		t.Fatalf("%d data writes, want 6", len(data))
	}
	for i, f := range data[:3] {
		if f.p.RETH.RKey != ep.RingRKey || f.p.RETH.VA != ep.RingAddr+uint64(i*512) {
			t.Errorf("message %d written to %#x/%#x, want slot %d of the small ring", i, f.p.RETH.VA, f.p.RETH.RKey, i)
		}
	}
	next, ack := promotionChecks(t, fr, l, 0, Req{Phase: 0, Size: 100}, ep.RingAddr, ep.RingRKey)
	if ack.Addr != l.b.ch.rx.ring.Addr() || ack.RKey != l.b.ch.rx.ring.RKey() || ack.RKey == ep.RingRKey {
		t.Errorf("ack names %#x/%#x, receiver's grown ring is %#x/%#x", ack.Addr, ack.RKey, l.b.ch.rx.ring.Addr(), l.b.ch.rx.ring.RKey())
	}
	for i, f := range data[3:] {
		if f.p.RETH.RKey != ack.RKey || f.p.RETH.VA != ack.Addr+uint64(i*512) {
			t.Errorf("message %d written to %#x/%#x, want slot %d of the grown ring", 3+i, f.p.RETH.VA, f.p.RETH.RKey, i)
		}
	}
	dataChecks(t, fr, next, ack, 100)
	sa, sb := l.a.ch.Stats(), l.b.ch.Stats()
	if sa.SendPhase != 0 || sa.SendState != StateSmall || sa.Promotions != 1 || sb.Promotions != 1 || sb.RecvPhase != 0 {
		t.Errorf("after growth: sender %+v, receiver %+v", sa, sb)
	}
	if want := 16*512 + MailboxLen; sb.RegisteredBytes != want {
		t.Errorf("receiver registered %d B, want %d (grown ring and mailbox)", sb.RegisteredBytes, want)
	}
	wantDump(t, pcaptest.Describe(t, l.pcap.Bytes()), "ENLARGE_REQ phase=0 size=100", "ENLARGE_ACK addr=0x")
}
