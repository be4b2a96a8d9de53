package roce_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// slowWakeLink is a link whose Wait returns a while after it was woken, as a
// progress engine on a loaded machine does, and which counts Wake calls.
type slowWakeLink struct {
	link.Link
	wakes atomic.Int64
	delay time.Duration
}

func (l *slowWakeLink) Wake() {
	l.wakes.Add(1)
	l.Link.Wake()
}

func (l *slowWakeLink) Wait(timeout time.Duration) error {
	err := l.Link.Wait(timeout)
	time.Sleep(l.delay)
	return err
}

// TestDoorbellWakesOnce: a burst of posts while the engine sleeps wakes its
// link once, not once per post (each Wake is a system call on AF_XDP).
func TestDoorbellWakesOnce(t *testing.T) {
	la, lb, err := pipe.New(pipe.Config{MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	sl := &slowWakeLink{Link: la, delay: 50 * time.Millisecond}
	p := newDevices(t, sl, lb)
	x, _ := connectRC(t, p, connCfg{maxWR: 256})
	// Let the engine go idle: no timers, nothing to send.
	time.Sleep(150 * time.Millisecond)
	before, rounds := sl.wakes.Load(), p.a.Stats().Rounds
	const posts = 100
	for i := range posts {
		if err := x.qp.PostRecv(roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{x.sge(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	// The posts take far less than the engine's 50 ms wake-up: one Wake (a
	// descheduled test goroutine may see the engine asleep again, hence the
	// slack; one per post fails).
	wakes := sl.wakes.Load() - before
	if wakes < 1 || wakes > 3 {
		t.Errorf("%d posts while the engine slept made %d Wake calls, want 1", posts, wakes)
	}
	if st := p.a.Stats(); st.Wakeups < uint64(wakes) {
		t.Errorf("Stats.Wakeups = %d, want at least %d", st.Wakeups, wakes)
	}
	// And the engine did run the posts' round.
	deadline := time.Now().Add(2 * time.Second)
	for p.a.Stats().Rounds == rounds {
		if time.Now().After(deadline) {
			t.Fatal("the engine did not run after the doorbell")
		}
		time.Sleep(time.Millisecond)
	}
}
