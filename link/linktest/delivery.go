package linktest

import (
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
)

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
