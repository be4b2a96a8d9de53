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
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"sync"
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

func testProps(t *testing.T, p Pair) {
	for _, l := range []link.Link{p.A, p.B} {
		pr := l.Props()
		if pr.Name == "" {
			t.Errorf("Props().Name is empty")
		}
		if pr.MTU < 576 {
			t.Errorf("Props().MTU = %d, want ≥ 576", pr.MTU)
		}
		if pr.MaxFrame < pr.MTU+14 {
			t.Errorf("Props().MaxFrame = %d, want ≥ MTU+14 = %d", pr.MaxFrame, pr.MTU+14)
		}
		bufs := make([][]byte, 1)
		if l.Alloc(bufs) != 1 {
			t.Fatalf("Alloc of one buffer on a fresh link gave none")
		}
		if len(bufs[0]) != pr.MaxFrame {
			t.Errorf("Alloc gave a buffer of %d bytes, want MaxFrame = %d", len(bufs[0]), pr.MaxFrame)
		}
		l.Free(bufs)
	}
}

// sizes returns the frame sizes to try: the small ones, the powers of two
// around them, the MTU edge and MaxFrame (frames over MTU+14 carry a VLAN
// tag so that their IP packet still fits the MTU).
func sizes(pr link.Props, v6 bool) []int {
	min := 60
	if v6 {
		min = 14 + 40 + 8 + 4
	}
	s := []int{min, min + 1, min + 2, min + 3, min + 4, 64, 65, 100, 127, 128, 129, 255, 256, 257,
		511, 512, 1000, 1023, 1024, 1025, 1500, 2048, 4096, 4138, 8192, 9018,
		pr.MTU + 13, pr.MTU + 14, pr.MTU + 15, pr.MTU + 17, pr.MTU + 18, pr.MaxFrame - 1, pr.MaxFrame}
	s = slices.DeleteFunc(s, func(n int) bool { return n < min || n > pr.MaxFrame || n > pr.MTU+18 })
	slices.Sort(s)
	return slices.Compact(s)
}

func testSizes(t *testing.T, p Pair) {
	a, b := p.ab()
	v6 := p.AddrA.Is6()
	for _, n := range sizes(a.l.Props(), v6) {
		transfer(t, a, b, []int{n}, uint32(n))
	}
	// Everything again, in one stream of batches.
	transfer(t, a, b, sizes(a.l.Props(), v6), 1<<20)
}

func testBothDirections(t *testing.T, p Pair) {
	a, b := p.ab()
	transfer(t, a, b, []int{100, 1000, a.l.Props().MTU + 14}, 7)
	transfer(t, b, a, []int{100, 1000, b.l.Props().MTU + 14}, 8)
	transfer(t, a, b, []int{64}, 9)
}

func testBatch(t *testing.T, p Pair) {
	a, b := p.ab()
	ns := make([]int, 32)
	for i := range ns {
		ns[i] = 64 + 37*i
	}
	transfer(t, a, b, ns, 100)
	for i := range ns {
		ns[i] = 1024
	}
	transfer(t, a, b, ns, 200)
}

// allocAll takes buffers from l until it gives no more, retrying for up to
// a second in case transmit completions are asynchronous, or until want.
func allocAll(l link.Link, want int) [][]byte {
	var got [][]byte
	chunk := make([][]byte, 64)
	deadline := time.Now().Add(time.Second)
	for {
		n := l.Alloc(chunk)
		got = append(got, chunk[:n]...)
		if n > 0 {
			continue
		}
		if (want > 0 && len(got) >= want) || (want == 0 && len(got) > 0) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

func testAllocFree(t *testing.T, p Pair) {
	l := p.A
	max := l.Props().MaxFrame
	first := allocAll(l, 0)
	if len(first) == 0 {
		t.Fatal("Alloc gave no buffers")
	}
	seen := make(map[*byte]bool)
	for _, b := range first {
		if len(b) != max {
			t.Fatalf("Alloc gave a %d-byte buffer, want %d", len(b), max)
		}
		if seen[&b[0]] {
			t.Fatalf("Alloc gave the same buffer twice")
		}
		seen[&b[0]] = true
	}
	l.Free(first)
	second := allocAll(l, len(first))
	if len(second) != len(first) {
		t.Fatalf("after Free of all %d buffers, Alloc gave %d", len(first), len(second))
	}
	// Free in two halves, in another order.
	l.Free(second[len(second)/2:])
	l.Free(second[:len(second)/2])
	third := allocAll(l, len(first))
	if len(third) != len(first) {
		t.Fatalf("after Free in halves, Alloc gave %d of %d", len(third), len(first))
	}
	// Buffers resliced shorter (as a caller does before deciding not to
	// send) are still taken back.
	for i := range third {
		third[i] = third[i][:i%60]
	}
	l.Free(third)
	fourth := allocAll(l, len(first))
	if len(fourth) != len(first) {
		t.Fatalf("after Free of resliced buffers, Alloc gave %d of %d", len(fourth), len(first))
	}
	l.Free(fourth)
}

func testSendReturnsBuffers(t *testing.T, p Pair) {
	a, b := p.ab()
	total := len(allocAllFree(a.l))
	// Send more frames than there are buffers, in batches, draining the
	// receiver: a leak would run Alloc dry.
	sent := 0
	for round := 0; sent < 3*total; round++ {
		k := min(16, total)
		ns := make([]int, k)
		for i := range ns {
			ns[i] = 128
		}
		transfer(t, a, b, ns, uint32(round*1000))
		sent += k
		if t.Failed() {
			return
		}
	}
	after := allocAll(a.l, total)
	if len(after) != total {
		t.Errorf("after sending %d frames, Alloc gives %d buffers, want %d", sent, len(after), total)
	}
	a.l.Free(after)
}

func allocAllFree(l link.Link) [][]byte {
	bufs := allocAll(l, 0)
	l.Free(bufs)
	return bufs
}

func testForeignBuffer(t *testing.T, p Pair) {
	mine := make([][]byte, 1)
	if p.A.Alloc(mine) != 1 {
		t.Fatal("Alloc gave no buffer")
	}
	foreign := make([]byte, 100)
	err := p.A.Send([][]byte{foreign})
	if err == nil {
		t.Errorf("Send of a buffer not from Alloc returned nil error")
	}
	p.A.Free([][]byte{foreign}) // must be ignored
	p.A.Free(mine)
	// The link still works.
	a, b := p.ab()
	transfer(t, a, b, []int{200}, 5)
}

func drain(l link.Link) {
	frames := make([][]byte, 64)
	for {
		n, err := l.Receive(frames)
		if n == 0 || err != nil {
			return
		}
	}
}

// settle consumes stale wake-ups so that the next Wait really waits.
func settle(l link.Link) {
	for range 3 {
		drain(l)
		l.Wait(5 * time.Millisecond)
	}
	drain(l)
}

func testWaitTimeout(t *testing.T, p Pair) {
	settle(p.B)
	const d = 60 * time.Millisecond
	var best time.Duration
	// A stray wake-up may cut one wait short; one of three must last.
	for range 3 {
		start := time.Now()
		if err := p.B.Wait(d); err != nil {
			t.Fatalf("Wait(%v) on an idle link: %v", d, err)
		}
		el := time.Since(start)
		if el > 5*time.Second {
			t.Fatalf("Wait(%v) took %v", d, el)
		}
		best = max(best, el)
	}
	if best < d*3/4 {
		t.Errorf("Wait(%v) on an idle link returned after at most %v", d, best)
	}
	start := time.Now()
	if err := p.B.Wait(0); err != nil {
		t.Fatalf("Wait(0): %v", err)
	}
	if el := time.Since(start); el > 50*time.Millisecond {
		t.Errorf("Wait(0) took %v", el)
	}
}

func testWaitWake(t *testing.T, p Pair) {
	settle(p.B)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(30 * time.Millisecond)
		p.B.Wake()
	}()
	start := time.Now()
	err := p.B.Wait(10 * time.Second)
	el := time.Since(start)
	wg.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if el > 3*time.Second {
		t.Errorf("Wait returned %v after a Wake 30ms in", el)
	}
	// Also with no timeout at all.
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(20 * time.Millisecond)
		p.B.Wake()
	}()
	done := make(chan error, 1)
	go func() { done <- p.B.Wait(-1) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Wait(-1): %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Wait(-1) did not return after Wake")
		p.B.Close()
		<-done
	}
	wg.Wait()
}

func testWakeBeforeWait(t *testing.T, p Pair) {
	settle(p.B)
	p.B.Wake()
	start := time.Now()
	if err := p.B.Wait(10 * time.Second); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Wait after Wake took %v", el)
	}
}

// testWakeNeverLost races Wake from another goroutine against Wait, many
// times: every Wake must end a Wait (the one in progress or the next).
func testWakeNeverLost(t *testing.T, p Pair) {
	settle(p.B)
	const rounds = 300
	ping := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range rounds {
			if _, ok := <-ping; !ok {
				return
			}
			if i%3 == 1 {
				time.Sleep(time.Duration(i%7) * 10 * time.Microsecond)
			}
			p.B.Wake()
		}
	}()
	defer func() { close(ping); <-done }()
	for i := range rounds {
		ping <- struct{}{}
		start := time.Now()
		if err := p.B.Wait(3 * time.Second); err != nil {
			t.Fatalf("round %d: Wait: %v", i, err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("round %d: a Wake was lost (Wait returned after %v)", i, el)
		}
	}
}

func testWaitArrival(t *testing.T, p Pair) {
	a, b := p.ab()
	settle(b.l)
	errc := make(chan error, 1)
	go func() {
		time.Sleep(30 * time.Millisecond)
		errc <- sendFrames(a, b, []int{300}, 77)
	}()
	start := time.Now()
	err := b.l.Wait(10 * time.Second)
	el := time.Since(start)
	if serr := <-errc; serr != nil {
		t.Fatalf("Send: %v", serr)
	}
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if el > 3*time.Second {
		t.Errorf("Wait returned %v after a frame was sent 30ms in", el)
	}
	// The frame is there (allowing for a wake-up that came a little early).
	want := buildFrames(a, b, []int{300}, 77)
	recvExpect(t, a, b, want)
}

func testClose(t *testing.T, p Pair) {
	bufs := make([][]byte, 2)
	if p.A.Alloc(bufs) != 2 {
		t.Fatal("Alloc gave fewer than 2 buffers")
	}
	if err := p.A.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := p.A.Close(); !errors.Is(err, link.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if err := p.A.Send(bufs[:1]); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	p.A.Free(bufs[1:]) // must not panic
	if _, err := p.A.Receive(make([][]byte, 4)); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Receive after Close: %v, want ErrClosed", err)
	}
	if err := p.A.Wait(10 * time.Millisecond); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Wait after Close: %v, want ErrClosed", err)
	}
	p.A.Wake() // must not panic
	_ = p.A.Props()
	if n := p.A.Alloc(make([][]byte, 4)); n != 0 {
		t.Errorf("Alloc after Close gave %d buffers", n)
	}
	// The other end still works on its own.
	if _, err := p.B.Receive(make([][]byte, 4)); err != nil {
		t.Errorf("Receive on the open end after its peer closed: %v", err)
	}
}

func testCloseWakesWait(t *testing.T, p Pair) {
	settle(p.B)
	done := make(chan error, 1)
	go func() { done <- p.B.Wait(-1) }()
	time.Sleep(30 * time.Millisecond)
	p.B.Close()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, link.ErrClosed) {
			t.Errorf("Wait interrupted by Close: %v, want nil or ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait(-1) did not return after a concurrent Close")
	}
}

func testEmptyCalls(t *testing.T, p Pair) {
	if err := p.A.Send(nil); err != nil {
		t.Errorf("Send(nil): %v", err)
	}
	if n, err := p.B.Receive(nil); n != 0 || err != nil {
		t.Errorf("Receive(nil) = %d, %v", n, err)
	}
	if n := p.A.Alloc(nil); n != 0 {
		t.Errorf("Alloc(nil) = %d", n)
	}
	p.A.Free(nil)
	a, b := p.ab()
	transfer(t, a, b, []int{70}, 1)
}

// testReceivedFramesStable checks that received frames stay intact until
// the next Receive, however many frames arrive meanwhile.
func testReceivedFramesStable(t *testing.T, p Pair) {
	a, b := p.ab()
	first := buildFrames(a, b, []int{400, 401}, 10)
	if err := sendRaw(a.l, first); err != nil {
		t.Fatal(err)
	}
	synth := b.l.Props().SyntheticHeaders
	frames := make([][]byte, 1)
	deadline := time.Now().Add(Timeout)
	for {
		n, err := b.l.Receive(frames)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no frame received")
		}
		b.l.Wait(50 * time.Millisecond)
	}
	held := frames[0]
	if !sameFrame(first[0], held, synth) {
		t.Fatalf("first frame differs")
	}
	// More traffic, without calling Receive.
	for i := range 4 {
		if err := sendFrames(a, b, []int{400, 400, 400, 400}, uint32(100+10*i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if !sameFrame(first[0], held, synth) {
		t.Errorf("a received frame changed before the next Receive call")
	}
	drain(b.l)
}

func testNoAllocs(t *testing.T, p Pair) {
	a, b := p.ab()
	want := buildFrames(a, b, []int{512}, 3)[0]
	bufs := make([][]byte, 1)
	frames := make([][]byte, 8)
	synth := b.l.Props().SyntheticHeaders
	fails := 0
	round := func() {
		if a.l.Alloc(bufs) != 1 {
			fails++
			return
		}
		n := copy(bufs[0], want)
		bufs[0] = bufs[0][:n]
		if a.l.Send(bufs) != nil {
			fails++
			return
		}
		deadline := time.Now().Add(Timeout)
		for {
			k, err := b.l.Receive(frames)
			if err != nil {
				fails++
				return
			}
			if k > 0 {
				if k != 1 || !sameFrame(want, frames[0], synth) {
					fails++
				}
				return
			}
			if time.Now().After(deadline) {
				fails++
				return
			}
			b.l.Wait(100 * time.Millisecond)
		}
	}
	for range 20 { // warm up
		round()
	}
	allocs := testing.AllocsPerRun(200, round)
	if fails > 0 {
		t.Fatalf("%d of the rounds failed to carry the frame", fails)
	}
	if allocs != 0 {
		t.Errorf("Alloc+Send+Receive+Wait of one frame: %v allocations per frame, want 0", allocs)
	}
}

// transfer sends frames of the given sizes from a to b (batches of up to 16
// per Send) and checks that they arrive intact and in order.
func transfer(t *testing.T, a, b end, ns []int, seq uint32) {
	t.Helper()
	want := buildFrames(a, b, ns, seq)
	for i := 0; i < len(want); i += 16 {
		j := min(i+16, len(want))
		if err := sendRaw(a.l, want[i:j]); err != nil {
			t.Fatalf("Send: %v", err)
		}
		recvExpect(t, a, b, want[i:j])
		if t.Failed() {
			return
		}
	}
}

func sendFrames(a, b end, ns []int, seq uint32) error {
	return sendRaw(a.l, buildFrames(a, b, ns, seq))
}

func sendRaw(l link.Link, frames [][]byte) error {
	bufs := make([][]byte, len(frames))
	got := 0
	deadline := time.Now().Add(Timeout)
	for got < len(bufs) {
		got += l.Alloc(bufs[got:])
		if got < len(bufs) {
			if time.Now().After(deadline) {
				l.Free(bufs[:got])
				return errors.New("linktest: Alloc gave too few buffers")
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i, f := range frames {
		n := copy(bufs[i], f)
		if n != len(f) {
			l.Free(bufs)
			return errors.New("linktest: frame longer than the buffer")
		}
		bufs[i] = bufs[i][:n]
	}
	return l.Send(bufs)
}

// recvExpect receives len(want) frames on b and compares them with want, in
// order.
func recvExpect(t *testing.T, a, b end, want [][]byte) {
	t.Helper()
	synth := b.l.Props().SyntheticHeaders || a.l.Props().SyntheticHeaders
	frames := make([][]byte, 64)
	got := 0
	deadline := time.Now().Add(Timeout)
	for got < len(want) {
		n, err := b.l.Receive(frames)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, f := range frames[:n] {
			if got >= len(want) {
				t.Errorf("unexpected extra frame of %d bytes", len(f))
				continue
			}
			if !sameFrame(want[got], f, synth) {
				t.Errorf("frame %d (of %d bytes): received %d bytes that differ:\nwant % x\ngot  % x",
					got, len(want[got]), len(f), head(want[got]), head(f))
			}
			got++
		}
		if n > 0 {
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d frames (sizes %v) within %v", got, len(want), lens(want), Timeout)
		}
		if err := b.l.Wait(50 * time.Millisecond); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 80)] }

func lens(fs [][]byte) []int {
	n := make([]int, len(fs))
	for i, f := range fs {
		n[i] = len(f)
	}
	return n
}

// l3 returns the IP packet of an Ethernet frame (after one optional VLAN
// tag), trimmed to the IP length.
func l3(f []byte) []byte {
	if len(f) < 14 {
		return nil
	}
	et := binary.BigEndian.Uint16(f[12:])
	p := f[14:]
	if et == 0x8100 && len(f) >= 18 {
		et = binary.BigEndian.Uint16(f[16:])
		p = f[18:]
	}
	switch {
	case et == 0x0800 && len(p) >= 20:
		n := int(binary.BigEndian.Uint16(p[2:]))
		if n > len(p) {
			return nil
		}
		return p[:n]
	case et == 0x86dd && len(p) >= 40:
		n := 40 + int(binary.BigEndian.Uint16(p[4:]))
		if n > len(p) {
			return nil
		}
		return p[:n]
	}
	return nil
}

// sameFrame compares a received frame with the one sent: whole when the
// link passes frames through; from the IP addresses on (addresses, UDP
// ports and length, payload) when headers are synthesised.
func sameFrame(want, got []byte, synth bool) bool {
	if !synth {
		return string(want) == string(got)
	}
	w, g := l3(want), l3(got)
	if w == nil || g == nil || len(w) != len(g) || w[0]>>4 != g[0]>>4 {
		return false
	}
	if w[0]>>4 == 4 {
		// Protocol, addresses, then UDP (checksum excepted) and payload.
		return w[9] == g[9] && string(w[12:26]) == string(g[12:26]) && string(w[28:]) == string(g[28:])
	}
	return w[6] == g[6] && string(w[8:46]) == string(g[8:46]) && string(w[48:]) == string(g[48:])
}

// buildFrames makes RoCEv2-shaped frames of the given sizes from a to b:
// Ethernet (VLAN-tagged when the IP packet would exceed the MTU otherwise),
// IPv4 with DF or IPv6, UDP to 4791 from a's SrcPort (or 0xC000), then a
// payload starting with a sequence number and a size-dependent pattern.
func buildFrames(a, b end, ns []int, seq uint32) [][]byte {
	pa, pb := a.l.Props(), b.l.Props()
	sport := pa.SrcPort
	if sport == 0 {
		sport = 0xC000
	}
	out := make([][]byte, len(ns))
	for i, n := range ns {
		f := make([]byte, n)
		if len(pb.HWAddr) == 6 {
			copy(f[0:6], pb.HWAddr)
		} else {
			copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 0xbb})
		}
		if len(pa.HWAddr) == 6 {
			copy(f[6:12], pa.HWAddr)
		} else {
			copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0xaa})
		}
		eth := 14
		if n-14 > pa.MTU {
			binary.BigEndian.PutUint16(f[12:], 0x8100)
			binary.BigEndian.PutUint16(f[14:], 0x0005) // VLAN 5
			eth = 18
		}
		ip := f[eth:]
		var udp []byte
		if a.addr.Is4() {
			binary.BigEndian.PutUint16(f[eth-2:], 0x0800)
			ip[0] = 0x45
			binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
			binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
			ip[8] = 64
			ip[9] = 17
			s4, d4 := a.addr.As4(), b.addr.As4()
			copy(ip[12:], s4[:])
			copy(ip[16:], d4[:])
			binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip[:20]))
			udp = ip[20:]
		} else {
			binary.BigEndian.PutUint16(f[eth-2:], 0x86dd)
			ip[0] = 0x60
			binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-40))
			ip[6] = 17
			ip[7] = 64
			s16, d16 := a.addr.As16(), b.addr.As16()
			copy(ip[8:], s16[:])
			copy(ip[24:], d16[:])
			udp = ip[40:]
		}
		binary.BigEndian.PutUint16(udp[0:], sport)
		binary.BigEndian.PutUint16(udp[2:], 4791)
		binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
		pl := udp[8:]
		// A BTH-like start: opcode UD SEND_ONLY, then the sequence number.
		pl[0] = 0x64
		if len(pl) >= 8 {
			binary.BigEndian.PutUint32(pl[4:], seq+uint32(i))
		}
		for j := 8; j < len(pl); j++ {
			pl[j] = byte(j*7 + n + i)
		}
		out[i] = f
	}
	return out
}

func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		if i == 10 {
			continue
		}
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
