package pipe_test

import (
	"bytes"
	"errors"
	"flag"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/linktest"
	"github.com/xdproce/xdproce/link/pipe"
)

var long = flag.Bool("long", false, "run the long variants")

func newPipe(t testing.TB, cfg pipe.Config) (a, b *pipe.Link) {
	t.Helper()
	a, b, err := pipe.New(cfg)
	if err != nil {
		t.Fatalf("pipe.New: %v", err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestConformance(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		t.Run("MTU"+itoa(mtu), func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				a, b := newPipe(t, pipe.Config{MTU: mtu, Depth: 64, TxBuffers: 48})
				return linktest.Pair{A: a, B: b,
					AddrA: netip.MustParseAddr("198.51.100.1"), AddrB: netip.MustParseAddr("198.51.100.2")}
			})
		})
	}
	t.Run("IPv6", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) linktest.Pair {
			a, b := newPipe(t, pipe.Config{})
			return linktest.Pair{A: a, B: b,
				AddrA: netip.MustParseAddr("2001:db8::1"), AddrB: netip.MustParseAddr("2001:db8::2")}
		})
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  pipe.Config
	}{
		{"small MTU", pipe.Config{MTU: 67}},
		{"huge MTU", pipe.Config{MTU: 70000}},
		{"negative depth", pipe.Config{Depth: -1}},
		{"negative tx buffers", pipe.Config{TxBuffers: -3}},
		{"loss > 1", pipe.Config{AtoB: pipe.Faults{Loss: 1.5}}},
		{"negative corrupt", pipe.Config{BtoA: pipe.Faults{Corrupt: -0.1}}},
		{"delay without time or count", pipe.Config{AtoB: pipe.Faults{Delay: 0.1}}},
		{"negative delay time", pipe.Config{AtoB: pipe.Faults{Delay: 0.1, DelayTime: -time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, err := pipe.New(tc.cfg)
			if err == nil || a != nil || b != nil {
				t.Fatalf("New(%+v) = %v, %v, %v; want an error", tc.cfg, a, b, err)
			}
		})
	}
	a, _ := newPipe(t, pipe.Config{})
	if err := a.SetFaults(pipe.Faults{Duplicate: 2}); err == nil {
		t.Error("SetFaults with duplicate rate 2 returned nil")
	}
}

func TestProps(t *testing.T) {
	a, b := newPipe(t, pipe.Config{MTU: 4200})
	pa, pb := a.Props(), b.Props()
	if pa.Name != "pipe" || pa.MTU != 4200 || pa.MaxFrame != 4218 || pa.SrcPort != 0 || pa.SyntheticHeaders {
		t.Errorf("Props() = %+v", pa)
	}
	if pa.HWAddr.String() != "02:00:00:00:00:0a" || pb.HWAddr.String() != "02:00:00:00:00:0b" {
		t.Errorf("MACs %v, %v", pa.HWAddr, pb.HWAddr)
	}
	pa.HWAddr[5] = 0xff // a copy: the link's own must not change
	if a.Props().HWAddr[5] != 0x0a {
		t.Error("Props().HWAddr aliases the link's address")
	}
}

// send sends one frame of n bytes whose first 4 bytes after the Ethernet
// addresses carry id.
func send(t testing.TB, l *pipe.Link, id uint32, n int) {
	t.Helper()
	bufs := make([][]byte, 1)
	if l.Alloc(bufs) != 1 {
		t.Fatal("Alloc: no buffer")
	}
	f := bufs[0][:n]
	for i := range f {
		f[i] = byte(i)
	}
	f[12], f[13], f[14], f[15] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
	if err := l.Send([][]byte{f}); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

func frameID(f []byte) uint32 {
	return uint32(f[12])<<24 | uint32(f[13])<<16 | uint32(f[14])<<8 | uint32(f[15])
}

// recvAll receives until nothing more comes within quiet.
func recvAll(t testing.TB, l *pipe.Link, quiet time.Duration) (ids []uint32, frames [][]byte) {
	t.Helper()
	buf := make([][]byte, 64)
	for {
		n, err := l.Receive(buf)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, f := range buf[:n] {
			ids = append(ids, frameID(f))
			frames = append(frames, bytes.Clone(f))
		}
		if n == 0 {
			start := time.Now()
			l.Wait(quiet)
			if n, _ := l.Receive(buf[:0]); n == 0 && time.Since(start) >= quiet {
				return ids, frames
			}
		}
	}
}

func TestLoss(t *testing.T) {
	a, b := newPipe(t, pipe.Config{Seed: 1, AtoB: pipe.Faults{Loss: 0.3}})
	const n = 2000
	got := 0
	for i := range n {
		send(t, a, uint32(i), 100)
		ids, _ := recvAll(t, b, 0)
		got += len(ids)
	}
	st := a.Stats()
	if st.Frames != n || st.Lost+uint64(got) != n || st.Received != uint64(got) || st.Delivered != uint64(got) {
		t.Fatalf("stats %+v, received %d of %d", st, got, n)
	}
	if st.Lost < n*25/100 || st.Lost > n*35/100 {
		t.Errorf("lost %d of %d at rate 0.3", st.Lost, n)
	}
	if bs := b.Stats(); bs.Frames != 0 {
		t.Errorf("b→a stats count frames: %+v", bs)
	}
}

func TestDeterministic(t *testing.T) {
	run := func(seed uint64) []uint32 {
		a, b := newPipe(t, pipe.Config{Seed: seed, AtoB: pipe.Faults{
			Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, ReorderHold: time.Hour, Delay: 0.05, DelayFrames: 3}})
		var all []uint32
		for i := range 500 {
			send(t, a, uint32(i), 80)
			ids, _ := recvAll(t, b, 0)
			all = append(all, ids...)
		}
		return all
	}
	x, y, z := run(7), run(7), run(8)
	if !slicesEqual(x, y) {
		t.Errorf("same seed, different deliveries:\n%v\n%v", x, y)
	}
	if slicesEqual(x, z) {
		t.Errorf("seeds 7 and 8 gave the same deliveries")
	}
}

func slicesEqual(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDuplicate(t *testing.T) {
	a, b := newPipe(t, pipe.Config{Seed: 2, AtoB: pipe.Faults{Duplicate: 1}})
	for i := range 10 {
		send(t, a, uint32(i), 64)
	}
	ids, frames := recvAll(t, b, 10*time.Millisecond)
	if len(ids) != 20 {
		t.Fatalf("got %d frames, want 20: %v", len(ids), ids)
	}
	for i := range 10 {
		if ids[2*i] != uint32(i) || ids[2*i+1] != uint32(i) || !bytes.Equal(frames[2*i], frames[2*i+1]) {
			t.Fatalf("frames %d and %d are not two copies of %d: %v", 2*i, 2*i+1, i, ids)
		}
	}
	if st := a.Stats(); st.Duplicated != 10 || st.Delivered != 20 {
		t.Errorf("stats %+v", st)
	}
}

func TestCorrupt(t *testing.T) {
	a, b := newPipe(t, pipe.Config{Seed: 3, AtoB: pipe.Faults{Corrupt: 0.5}})
	const n = 400
	want := make([]byte, 200)
	for i := range want {
		want[i] = byte(i)
	}
	diffs := 0
	for i := range n {
		bufs := make([][]byte, 1)
		a.Alloc(bufs)
		copy(bufs[0], want)
		if err := a.Send([][]byte{bufs[0][:len(want)]}); err != nil {
			t.Fatal(err)
		}
		_, frames := recvAll(t, b, 0)
		if len(frames) != 1 {
			t.Fatalf("frame %d: got %d frames", i, len(frames))
		}
		d := 0
		for j := range want {
			if frames[0][j] != want[j] {
				d++
			}
		}
		if d > 1 {
			t.Fatalf("frame %d has %d bytes changed, want at most 1", i, d)
		}
		diffs += d
	}
	st := a.Stats()
	if uint64(diffs) != st.Corrupted {
		t.Errorf("%d frames differ, stats say %d corrupted", diffs, st.Corrupted)
	}
	if diffs < n*40/100 || diffs > n*60/100 {
		t.Errorf("%d of %d corrupted at rate 0.5", diffs, n)
	}
}

func TestReorder(t *testing.T) {
	a, b := newPipe(t, pipe.Config{Seed: 4, AtoB: pipe.Faults{Reorder: 0.2, ReorderHold: time.Hour}})
	const n = 1000
	for i := range n {
		send(t, a, uint32(i), 64)
	}
	send(t, a, n, 64) // a frame that is not held may be needed to flush the last
	ids, _ := recvAll(t, b, 10*time.Millisecond)
	st := a.Stats()
	seen := make(map[uint32]bool)
	swaps := 0
	for i, id := range ids {
		if seen[id] {
			t.Fatalf("frame %d received twice", id)
		}
		seen[id] = true
		if i > 0 && id < ids[i-1] {
			swaps++
		}
	}
	if st.Reordered == 0 || st.Reordered > n*30/100 {
		t.Errorf("reordered %d of %d at rate 0.2", st.Reordered, n)
	}
	if swaps == 0 || uint64(swaps) > st.Reordered {
		t.Errorf("%d inversions in the received order, %d frames reordered", swaps, st.Reordered)
	}
	if len(ids) < n {
		t.Errorf("received %d frames, want at least %d", len(ids), n)
	}
}

func TestReorderHoldReleasesByTime(t *testing.T) {
	a, b := newPipe(t, pipe.Config{AtoB: pipe.Faults{Reorder: 1, ReorderHold: 20 * time.Millisecond}})
	send(t, a, 42, 64)
	if ids, _ := recvAll(t, b, 0); len(ids) != 0 {
		t.Fatalf("reordered frame delivered at once: %v", ids)
	}
	start := time.Now()
	if err := b.Wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	ids, _ := recvAll(t, b, 0)
	el := time.Since(start)
	if len(ids) != 1 || ids[0] != 42 {
		t.Fatalf("after the hold, got %v", ids)
	}
	if el < 10*time.Millisecond || el > 2*time.Second {
		t.Errorf("held frame came after %v, want about 20ms", el)
	}
}

func TestDelayFrames(t *testing.T) {
	a, b := newPipe(t, pipe.Config{AtoB: pipe.Faults{Delay: 1, DelayFrames: 2}})
	send(t, a, 1, 64)
	a.SetFaults(pipe.Faults{})
	send(t, a, 2, 64)
	if ids, _ := recvAll(t, b, 0); !slicesEqual(ids, []uint32{2}) {
		t.Fatalf("after one more frame got %v, want [2]", ids)
	}
	send(t, a, 3, 64)
	if ids, _ := recvAll(t, b, 0); !slicesEqual(ids, []uint32{3, 1}) {
		t.Fatalf("after two more frames got %v, want [3 1]", ids)
	}
	if st := a.Stats(); st.Delayed != 1 || st.Delivered != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestDelayTime(t *testing.T) {
	a, b := newPipe(t, pipe.Config{AtoB: pipe.Faults{Delay: 1, DelayTime: 40 * time.Millisecond}})
	start := time.Now()
	send(t, a, 9, 64)
	var ids []uint32
	for len(ids) == 0 && time.Since(start) < 5*time.Second {
		if err := b.Wait(time.Second); err != nil {
			t.Fatal(err)
		}
		ids, _ = recvAll(t, b, 0)
	}
	el := time.Since(start)
	if !slicesEqual(ids, []uint32{9}) || el < 35*time.Millisecond || el > 3*time.Second {
		t.Errorf("got %v after %v, want [9] after about 40ms", ids, el)
	}
}

func TestOverflowIsBounded(t *testing.T) {
	a, b := newPipe(t, pipe.Config{Depth: 8, TxBuffers: 4})
	for i := range 100 {
		send(t, a, uint32(i), 100)
	}
	ids, _ := recvAll(t, b, 0)
	if !slicesEqual(ids, []uint32{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("received %v, want the first 8", ids)
	}
	if st := a.Stats(); st.Overflow != 92 || st.Delivered != 8 {
		t.Errorf("stats %+v", st)
	}
	// Room again once received.
	send(t, a, 500, 100)
	if ids, _ := recvAll(t, b, 0); !slicesEqual(ids, []uint32{500}) {
		t.Errorf("after draining got %v", ids)
	}
}

func TestFramesValidUntilNextReceive(t *testing.T) {
	a, b := newPipe(t, pipe.Config{Depth: 4})
	send(t, a, 1, 64)
	frames := make([][]byte, 4)
	if n, _ := b.Receive(frames); n != 1 {
		t.Fatal("no frame")
	}
	first := frames[0]
	// Fill the queue while the first frame is still lent: it must not be
	// overwritten.
	for i := range 6 {
		send(t, a, uint32(10+i), 64)
	}
	if frameID(first) != 1 {
		t.Errorf("lent frame overwritten before the next Receive: id %d", frameID(first))
	}
	if st := a.Stats(); st.Delivered != 4 || st.Overflow != 3 {
		t.Errorf("stats %+v (one slot is lent, three free)", st)
	}
}

func TestPeerClosed(t *testing.T) {
	a, b := newPipe(t, pipe.Config{})
	send(t, a, 1, 64)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	send(t, a, 2, 64) // no error: the far end is just gone
	if st := a.Stats(); st.PeerClosed != 1 || st.Delivered != 1 {
		t.Errorf("stats %+v", st)
	}
	if _, err := b.Receive(make([][]byte, 4)); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Receive on the closed end: %v", err)
	}
	if n, err := a.Receive(make([][]byte, 4)); n != 0 || err != nil {
		t.Errorf("Receive on the open end: %d, %v", n, err)
	}
}

func TestSendErrors(t *testing.T) {
	a, b := newPipe(t, pipe.Config{})
	bufs := make([][]byte, 3)
	a.Alloc(bufs)
	// A runt, a good frame, and the good frame's buffer again (already
	// handed back by then).
	good := bufs[1][:64]
	copy(good[12:], []byte{0, 0, 0, 5})
	if err := a.Send([][]byte{bufs[0][:10], good, good}); err == nil {
		t.Error("Send with a runt and a repeated buffer returned nil")
	}
	ids, _ := recvAll(t, b, 0)
	if !slicesEqual(ids, []uint32{5}) {
		t.Errorf("received %v, want just the good frame", ids)
	}
	a.Free(bufs[2:])
	// Every buffer is back.
	all := make([][]byte, pipe.DefaultTxBuffers+1)
	if n := a.Alloc(all); n != pipe.DefaultTxBuffers {
		t.Errorf("Alloc gives %d buffers, want %d", n, pipe.DefaultTxBuffers)
	}
}

// TestMixedFaultsSoak pushes many frames through every fault at once and
// checks the books balance: every frame sent is lost, overflowed or
// delivered, and nothing is delivered that was not sent.
func TestMixedFaultsSoak(t *testing.T) {
	n := 20000
	if *long {
		n = 1000000
	}
	a, b := newPipe(t, pipe.Config{Seed: 99, Depth: 512, AtoB: pipe.Faults{ // room for a burst of held frames on a slow (-race) run
		Loss: 0.05, Duplicate: 0.01, Corrupt: 0.001, Reorder: 0.02, Delay: 0.01, DelayFrames: 5, DelayTime: time.Millisecond}})
	done := make(chan struct{})
	var got uint64
	go func() {
		defer close(done)
		frames := make([][]byte, 64)
		for {
			k, err := b.Receive(frames)
			if err != nil {
				return
			}
			for _, f := range frames[:k] {
				if len(f) != 100 || frameID(f) >= uint32(n) {
					t.Errorf("bad frame: %d bytes, id %d", len(f), frameID(f))
					return
				}
			}
			got += uint64(k)
			if k == 0 {
				b.Wait(10 * time.Millisecond)
			}
		}
	}()
	bufs := make([][]byte, 16)
	for i := 0; i < n; {
		// Flow control, so that the faults and not the queue decide.
		for st := a.Stats(); st.Delivered-st.Received > 64; st = a.Stats() {
			time.Sleep(20 * time.Microsecond)
		}
		k := a.Alloc(bufs[:min(16, n-i)])
		for j := range k {
			f := bufs[j][:100]
			f[12], f[13], f[14], f[15] = byte((i+j)>>24), byte((i+j)>>16), byte((i+j)>>8), byte(i+j)
			bufs[j] = f
		}
		if err := a.Send(bufs[:k]); err != nil {
			t.Fatal(err)
		}
		i += k
	}
	time.Sleep(50 * time.Millisecond) // let time-held frames go
	a.Send(nil)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if st := a.Stats(); st.Received == st.Delivered && st.Delivered > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Close()
	<-done
	st := a.Stats()
	t.Logf("%+v", st)
	if st.Frames != uint64(n) {
		t.Errorf("Frames = %d, want %d", st.Frames, n)
	}
	if st.Frames+st.Duplicated-st.Lost-st.Overflow-st.PeerClosed != st.Delivered {
		t.Errorf("books do not balance (frames+duplicated-lost-overflow-peerclosed != delivered): %+v", st)
	}
	if st.Received != got {
		t.Errorf("Received = %d, receiver counted %d", st.Received, got)
	}
	if st.Overflow > uint64(n/100) {
		t.Errorf("%d frames overflowed despite flow control", st.Overflow)
	}
	if st.Lost == 0 || st.Duplicated == 0 || st.Reordered == 0 || st.Delayed == 0 || st.Corrupted == 0 {
		t.Errorf("a fault never fired: %+v", st)
	}
}

// TestNoAllocsWithFaults: the fault paths (hold, release, duplicate,
// corrupt, timed wait) allocate nothing per frame either.
func TestNoAllocsWithFaults(t *testing.T) {
	a, b := newPipe(t, pipe.Config{Seed: 5, AtoB: pipe.Faults{Loss: 0.1, Duplicate: 0.1, Corrupt: 0.1,
		Reorder: 0.2, Delay: 0.1, DelayFrames: 3, DelayTime: 50 * time.Microsecond}})
	bufs := make([][]byte, 4)
	frames := make([][]byte, 16)
	total := 0
	round := func() {
		n := a.Alloc(bufs)
		for i := range n {
			bufs[i] = bufs[i][:200]
		}
		a.Send(bufs[:n])
		b.Wait(20 * time.Microsecond)
		k, _ := b.Receive(frames)
		total += k
	}
	for range 100 {
		round()
	}
	if allocs := testing.AllocsPerRun(1000, round); allocs != 0 {
		t.Errorf("%v allocations per round of 4 frames, want 0", allocs)
	}
	st := a.Stats()
	if st.Reordered == 0 || st.Delayed == 0 || st.Duplicated == 0 || st.Corrupted == 0 || total == 0 {
		t.Errorf("faults did not all fire: %+v, received %d", st, total)
	}
}

// TestDelayEveryFrameByCount: with every frame delayed by 2 frames, the
// stream still flows, 2 frames behind.
func TestDelayEveryFrameByCount(t *testing.T) {
	a, b := newPipe(t, pipe.Config{AtoB: pipe.Faults{Delay: 1, DelayFrames: 2}})
	for i := 1; i <= 10; i++ {
		send(t, a, uint32(i), 64)
	}
	ids, _ := recvAll(t, b, 0)
	if !slicesEqual(ids, []uint32{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("got %v, want 1..8", ids)
	}
}

// TestReorderHoldWakesWaiter: a Wait that began before a frame was held
// (with no deadline of its own) returns when the frame's hold ends, not at
// its own timeout: an engine asleep without timers would otherwise never
// see the last frame of a burst.
func TestReorderHoldWakesWaiter(t *testing.T) {
	a, b := newPipe(t, pipe.Config{AtoB: pipe.Faults{Reorder: 1, ReorderHold: 20 * time.Millisecond}})
	done := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		_ = b.Wait(-1)
		done <- time.Since(start)
	}()
	time.Sleep(5 * time.Millisecond) // let the Wait start
	send(t, a, 42, 64)
	select {
	case el := <-done:
		if el < 15*time.Millisecond {
			t.Errorf("Wait returned after %v, before the hold ended", el)
		}
	case <-time.After(5 * time.Second):
		b.Wake()
		t.Fatal("Wait did not return when the held frame was due")
	}
	if ids, _ := recvAll(t, b, 0); len(ids) != 1 || ids[0] != 42 {
		t.Fatalf("after the hold, got %v", ids)
	}
}
