package qp

import (
	"slices"
	"testing"
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
			{send: 20, sack: true, base: 100, held: []int{1, 64}, resend: []uint32{100, 102, 103, 104, 105, 106, 107, 108, 109, 110,
				111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135,
				136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160,
				161, 162, 163}},
		}},
		{"timeout: everything not held", []step{
			{sack: true, base: 100, held: []int{1, 3}, resend: []uint32{100, 102}},
			{lost: true, resend: []uint32{100, 102, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118,
				119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142,
				143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163}},
		}},
		{"all holes filled", []step{
			{sack: true, base: 100, held: []int{2, 4}, resend: []uint32{100, 101, 103}},
			{ack: 105, resend: nil},
			{ack: 110, sack: true, base: 110, held: []int{1}, resend: []uint32{110}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w sendWindow
			w.start(100, 1024, false)
			w.sr.enable(true, &w)
			if w.limit != srSlots || w.cwnd > srSlots {
				t.Fatalf("window limit %d cwnd %d, want at most %d", w.limit, w.cwnd, srSlots)
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
				if s.ack != 0 {
					w.advance(s.ack)
				}
				if s.sack {
					w.sr.sack(s.base, sackBits(s.held...), w.una, w.max)
				}
				if s.lost {
					w.sr.lostAll(w.una, w.max)
				}
				var got []uint32
				for {
					psn, ok := w.sr.nextHole(w.una)
					if !ok {
						break
					}
					got = append(got, psn)
					w.sr.markResent(psn, w.max)
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
	w.sr.enable(false, &w)
	w.sent(100, 101, true, 0, 1)
	w.sr.sack(100, sackBits(1), 100, 101)
	if _, ok := w.sr.nextHole(100); ok || w.limit != 1024 {
		t.Fatalf("go-back-N window: a hole named, or limit %d", w.limit)
	}
}
