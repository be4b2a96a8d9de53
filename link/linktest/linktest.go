// Package linktest is a conformance suite for link.Link implementations.
//
// A link package runs it from its tests with a function that makes a fresh,
// connected, fault-free pair:
//
//	func TestConformance(t *testing.T) {
//		linktest.Run(t, func(t *testing.T) linktest.Pair {
//			a, b := …
//			return linktest.Pair{A: a, B: b, AddrA: …, AddrB: …}
//		})
//	}
//
// The suite sends well-formed Ethernet/IPv4 (or IPv6)/UDP frames to UDP port
// 4791, so links that parse frames (link/udp) or steer them (link/xsk) carry
// them. For links whose Props.SyntheticHeaders is set, received frames are
// compared from the IP addresses and UDP ports onward; otherwise byte for
// byte.
package linktest

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
)

// Pair is two connected links: frames A sends to AddrB arrive at B, and the
// other way round.
type Pair struct {
	A, B link.Link
	// AddrA and AddrB are the IP addresses of the ends (both IPv4 or both
	// IPv6); the suite's frames carry them.
	AddrA, AddrB netip.Addr
}

// NewPair makes a fresh pair. Run calls it once for the subtests that keep
// the links open (with the t of a subtest "Link" grouping them) and once more
// for each subtest that closes them (with that subtest's t); each pair is
// released at the end of the subtest it was made for. The suite closes the links it gets (Close
// errors are ignored), so NewPair need not register clean-ups for them, but
// must for anything else it creates.
type NewPair func(t *testing.T) Pair

// Timeout bounds each wait for frames in the suite.
var Timeout = 5 * time.Second

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, newPair NewPair) {
	tests := []struct {
		name  string
		fn    func(*testing.T, Pair)
		fresh bool // closes the links: needs a pair of its own
	}{
		{"Props", testProps, false},
		{"SizesInOrder", testSizes, false},
		{"BothDirections", testBothDirections, false},
		{"Batch", testBatch, false},
		{"AllocFree", testAllocFree, false},
		{"SendReturnsBuffers", testSendReturnsBuffers, false},
		{"ForeignBuffer", testForeignBuffer, false},
		{"WaitTimeout", testWaitTimeout, false},
		{"WaitWake", testWaitWake, false},
		{"WakeBeforeWait", testWakeBeforeWait, false},
		{"WakeNeverLost", testWakeNeverLost, false},
		{"WaitArrival", testWaitArrival, false},
		{"EmptyCalls", testEmptyCalls, false},
		{"ReceivedFramesStable", testReceivedFramesStable, false},
		{"NoAllocs", testNoAllocs, false},
		{"Close", testClose, true},
		{"CloseWakesWait", testCloseWakesWait, true},
	}
	mk := func(t *testing.T) Pair {
		p := newPair(t)
		t.Cleanup(func() {
			p.A.Close()
			p.B.Close()
		})
		if p.AddrA.Is4() != p.AddrB.Is4() || !p.AddrA.IsValid() || !p.AddrB.IsValid() {
			t.Fatalf("pair addresses %v and %v: need two valid addresses of one family", p.AddrA, p.AddrB)
		}
		return p
	}
	// The subtests that keep the links open share one pair, made and
	// released within the subtest "Link" (so that links allowing one
	// socket per device queue are free again for the fresh pairs after).
	t.Run("Link", func(t *testing.T) {
		shared := mk(t)
		for _, tc := range tests {
			if tc.fresh {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				// Leftovers of an earlier subtest must not count here.
				drain(shared.A)
				drain(shared.B)
				tc.fn(t, shared)
			})
		}
	})
	for _, tc := range tests {
		if tc.fresh {
			t.Run(tc.name, func(t *testing.T) { tc.fn(t, mk(t)) })
		}
	}
}

// end is one side of a transfer.
type end struct {
	l    link.Link
	addr netip.Addr
}

func (p Pair) ab() (end, end) { return end{p.A, p.AddrA}, end{p.B, p.AddrB} }
