package linktest

import (
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
)

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
