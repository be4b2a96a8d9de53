//go:build linux

package udp_test

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce/wire"
)

// gsoRun builds the frames of one Send: n RoCEv2 frames of size payload
// bytes from src to dst (sport the sender's port), the last one short bytes
// shorter, each payload starting with its index; tos per frame from tosOf.
func gsoRun(t testing.TB, src, dst netip.Addr, sport uint16, n, size, short int, tosOf func(i int) uint8) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range n {
		p := bytes.Repeat([]byte{byte(i)}, size)
		if i == n-1 {
			p = p[:size-short]
		}
		binary.BigEndian.PutUint32(p, uint32(i))
		out[i] = encode(t, src, dst, sport, 0, tosOf(i), 64, p)
	}
	return out
}

// sendAll copies frames into buffers from l and sends them in one call.
func sendAll(t *testing.T, l *udp.Link, frames [][]byte) {
	t.Helper()
	bufs := make([][]byte, len(frames))
	if got := l.Alloc(bufs); got != len(frames) {
		t.Fatalf("Alloc gave %d of %d buffers", got, len(frames))
	}
	for i, f := range frames {
		bufs[i] = bufs[i][:copy(bufs[i], f)]
	}
	if err := l.Send(bufs); err != nil {
		t.Fatal(err)
	}
}

// recvN receives n frames (copies) within 5 s.
func recvN(t *testing.T, l *udp.Link, n int) [][]byte {
	t.Helper()
	var got [][]byte
	frames := make([][]byte, 64)
	for deadline := time.Now().Add(5 * time.Second); len(got) < n && time.Now().Before(deadline); {
		k, err := l.Receive(frames)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames[:k] {
			got = append(got, append([]byte(nil), f...))
		}
		if k == 0 {
			l.Wait(20 * time.Millisecond)
		}
	}
	if len(got) != n {
		t.Fatalf("received %d of %d frames (sender %+v, receiver %+v)", len(got), n, l.Stats(), l.Stats())
	}
	return got
}

// TestGSOGroupsAndICRC sends runs of equal-sized RoCEv2 frames over the
// loopback (which passes UDP_SEGMENT skbs whole to a UDP_GRO socket) and
// checks that they leave as GSO messages, arrive coalesced, split back into
// the frames sent, each with a valid ICRC for the Identification the kernel
// gives segment k (k, counted from 0 in each message); that a TOS change
// starts a new message; and that with NoGSO nothing is coalesced. The same
// from a link bound to all addresses.
func TestGSOGroupsAndICRC(t *testing.T) {
	for _, tc := range []struct {
		noGSO, wildcard bool
	}{{false, false}, {true, false}, {false, true}} {
		noGSO := tc.noGSO
		var a, b *udp.Link
		if tc.wildcard {
			// Bound to all addresses: IPV6_PKTINFO and UDP_SEGMENT in one
			// control buffer, IPv4-mapped destinations.
			a, b = pairPorts(t, netip.Addr{}, lo2, udp.Config{MTU: 9000})
		} else {
			a, b = pairSamePort(t, udp.Config{MTU: 9000, NoGSO: noGSO})
		}
		sport := a.Props().SrcPort
		// 20 frames of 4 KiB (15 fit 64 KiB: two messages), the last one
		// 100 bytes shorter; frames 5..7 with another TOS (ECN CE).
		sent := gsoRun(t, lo1, lo2, sport, 20, 4096, 100, func(i int) uint8 {
			if i >= 5 && i < 8 {
				return 0x03
			}
			return 0
		})
		sendAll(t, a, sent)
		got := recvN(t, b, len(sent))
		// Expected messages: [0..4] [5..7] [8..19] → IDs restart at each.
		wantID := func(i int) uint16 {
			switch {
			case noGSO:
				return 0
			case i < 5:
				return uint16(i)
			case i < 8:
				return uint16(i - 5)
			}
			return uint16(i - 8)
		}
		for i, g := range got {
			var p, q wire.Packet
			if err := p.Decode(g); err != nil {
				t.Fatalf("NoGSO=%v: frame %d: %v", noGSO, i, err)
			}
			q.Decode(sent[i])
			if !bytes.Equal(p.Payload, q.Payload) || p.BTH != q.BTH {
				t.Fatalf("NoGSO=%v: frame %d arrived as %d-byte payload %x…, want frame %d", noGSO, i, len(p.Payload), p.Payload[:4], i)
			}
			if p.IPID != wantID(i) {
				t.Errorf("NoGSO=%v: frame %d: IPv4 ID %d, want %d", noGSO, i, p.IPID, wantID(i))
			}
		}
		as, bs := a.Stats(), b.Stats()
		if noGSO && (as.TxGSOSends != 0 || bs.RxGROCoalesced != 0) {
			t.Errorf("NoGSO: sender %+v receiver %+v: GSO or GRO used", as, bs)
		}
		if !noGSO && (as.TxGSOSends != 3 || bs.RxGROCoalesced != 3) {
			t.Errorf("GSO: %d GSO messages sent, %d coalesced received; want 3 and 3", as.TxGSOSends, bs.RxGROCoalesced)
		}
	}
}

// TestGSONoAllocs: sending runs of 4 KiB frames with GSO and receiving them
// coalesced allocates nothing per frame.
func TestGSONoAllocs(t *testing.T) {
	a, b := pairSamePort(t, udp.Config{MTU: 9000})
	tmpl := gsoRun(t, lo1, lo2, a.Props().SrcPort, 16, 4096, 0, func(int) uint8 { return 0 })
	bufs := make([][]byte, 16)
	frames := make([][]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		n := a.Alloc(bufs)
		for i := range n {
			bufs[i] = bufs[i][:copy(bufs[i], tmpl[i])]
		}
		a.Send(bufs[:n])
		for got := 0; got < n; {
			k, _ := b.Receive(frames)
			if k == 0 {
				b.Wait(10 * time.Millisecond)
				if k, _ = b.Receive(frames); k == 0 {
					return
				}
			}
			got += k
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run of 16 frames", allocs)
	}
	if s := b.Stats(); s.RxGROCoalesced == 0 {
		t.Errorf("nothing coalesced: %+v", s)
	}
}

// TestGROPendingWakesWait: segments of a coalesced message that Receive did
// not return yet (it was given room for one frame) make Wait return at once
// and come out of the next Receive calls in order.
func TestGROPendingWakesWait(t *testing.T) {
	a, b := pairSamePort(t, udp.Config{MTU: 9000})
	sent := gsoRun(t, lo1, lo2, a.Props().SrcPort, 10, 2000, 0, func(int) uint8 { return 0 })
	sendAll(t, a, sent)
	one := make([][]byte, 1)
	for i := range sent {
		start := time.Now()
		if err := b.Wait(2 * time.Second); err != nil {
			t.Fatal(err)
		}
		if i > 0 && time.Since(start) > time.Second {
			t.Fatalf("frame %d: Wait blocked %v with segments pending", i, time.Since(start))
		}
		if n, err := b.Receive(one); n != 1 || err != nil {
			t.Fatalf("frame %d: Receive = %d, %v", i, n, err)
		}
		if got := binary.BigEndian.Uint32(one[0][len(one[0])-2004:]); got != uint32(i) {
			t.Fatalf("frame %d: got frame %d", i, got)
		}
	}
	if s := b.Stats(); s.RxGROCoalesced != 1 {
		t.Errorf("receiver %+v: want one coalesced message", s)
	}
}

// TestGSORefusedMidSend: the kernel refuses UDP_SEGMENT (no UDP checksums:
// EINVAL) at a flush inside one Send of 300 frames (more than one sendmmsg
// holds); GSO turns off, said once, and all 300 frames arrive in order and
// byte-exact, the later ones as plain datagrams.
func TestGSORefusedMidSend(t *testing.T) {
	var log bytes.Buffer
	var mu sync.Mutex
	a, b := pairSamePort(t, udp.Config{MTU: 1500, TxBuffers: 512, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))})
	if err := udp.DisableUDPChecksum(a); err != nil {
		t.Fatal(err)
	}
	sent := gsoRun(t, lo1, lo2, a.Props().SrcPort, 300, 200, 0, func(int) uint8 { return 0 })
	sendAll(t, a, sent)
	got := recvN(t, b, len(sent))
	for i := range got {
		sameRoCE(t, got[i], sent[i])
	}
	mu.Lock()
	defer mu.Unlock()
	if s := a.Stats(); s.TxFrames != 300 || s.TxGSOSends != 0 || s.TxErrors != 0 || strings.Count(log.String(), "GSO off") != 1 {
		t.Errorf("sender %+v, log %q", s, log.String())
	}
}
