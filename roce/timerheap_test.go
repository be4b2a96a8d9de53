package roce

import (
	"math/rand/v2"
	"testing"
)

// TestTimerHeapCompact: compact keeps exactly the live elements (queue pair
// not removed, on this engine, the element its heapAt names) and leaves a
// heap that pops them in time order.
func TestTimerHeapCompact(t *testing.T) {
	e, other := &engine{}, &engine{}
	rng := rand.New(rand.NewPCG(1, 2))
	var h timerHeap
	want := map[*qpEntry]int64{}
	for i := range 1000 {
		q := &qpEntry{}
		q.eng.Store(e)
		at := 1 + rng.Int64N(1e6)
		h.push(timer{at: at + 5, e: q}) // superseded by the earlier one below
		h.push(timer{at: at, e: q})
		q.heapAt = at
		switch i % 4 {
		case 0:
			q.dead.Store(true) // removed
		case 1:
			q.eng.Store(other) // moved
		default:
			want[q] = at
		}
	}
	h.compact(e)
	if len(h) != len(want) {
		t.Fatalf("%d elements after compact, want %d", len(h), len(want))
	}
	last := int64(0)
	for len(h) > 0 {
		x := h.pop()
		if at, ok := want[x.e]; !ok || at != x.at || x.at < last {
			t.Fatalf("popped %d (live %v, want at %d) after %d", x.at, ok, at, last)
		}
		delete(want, x.e)
		last = x.at
	}
}
