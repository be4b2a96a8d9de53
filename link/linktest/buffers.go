package linktest

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
)

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
