package xfer

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// pipeDevices makes two devices over link/pipe, whose Wait blocks until a
// frame or a wake-up: an idle device's engine sleeps for good, as over
// AF_XDP.
func pipeDevices(t *testing.T) (a, b *roce.Device) {
	t.Helper()
	la, lb, err := pipe.New(pipe.Config{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	if a, err = roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}}); err != nil {
		t.Fatal(err)
	}
	if b, err = roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.2")}}); err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestTeardownOnIdleDevices: after a transfer between two devices whose
// engines then sleep until woken, both ends' queue pairs are destroyed within
// a bounded time. (Over link/pipe roce's QP.Destroy happens to return by
// itself; TestPrivilegedTeardownXSK is the case where it does not.)
func TestTeardownOnIdleDevices(t *testing.T) {
	if raceEnabled {
		t.Skip("see race_on_test.go")
	}
	a, b := pipeDevices(t)
	r := newRigOn(t, a, b, &Options{SlotSize: 64 << 10, Slots: 2})
	data := randomBytes(200<<10, 3)
	start := time.Now()
	if _, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "idle", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-r.srvErr; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*destroyWait {
		t.Errorf("transfer and teardown took %v", d)
	}
	if !WaitTeardowns(5 * time.Second) {
		t.Fatal("queue pair teardowns still running after 5 s")
	}
	if qa, qb := r.client.Stats().QPs, r.server.Stats().QPs; qa != 0 || qb != 0 {
		t.Errorf("queue pairs alive after the transfer: client %d, server %d", qa, qb)
	}
}

// stuckQP is a queue pair whose Destroy returns only after it has been
// nudged need times (need < 0: never, until release is closed).
type stuckQP struct {
	need    int
	nudged  chan struct{}
	release chan struct{}
	mods    atomic.Int32
}

func newStuckQP(need int) *stuckQP {
	return &stuckQP{need: need, nudged: make(chan struct{}, 1000), release: make(chan struct{})}
}

func (q *stuckQP) Modify(a *roce.Attr, m roce.AttrMask) error {
	if a.State != qp.Error || m != qp.AttrState {
		panic("unexpected modify")
	}
	q.mods.Add(1)
	q.nudged <- struct{}{}
	return nil
}

func (q *stuckQP) Destroy() error {
	for i := 0; q.need < 0 || i < q.need; i++ {
		select {
		case <-q.nudged:
		case <-q.release:
			return nil
		}
	}
	return nil
}

// TestTeardownNudges: a Destroy that needs the engine to run again (as
// roce's does on an idle device) returns because teardown nudges it, and the
// work after it runs; a Destroy that never returns costs the caller
// destroyWait, and the nudging stops after nudgeFor.
func TestTeardownNudges(t *testing.T) {
	q := newStuckQP(2)
	after := make(chan struct{})
	start := time.Now()
	teardown(q, func() { close(after) })
	select {
	case <-after:
	default:
		t.Fatalf("teardown returned after %v without running after", time.Since(start))
	}
	if d := time.Since(start); d > destroyWait/2 {
		t.Errorf("two nudges took %v", d)
	}

	defer func(d time.Duration) { nudgeFor = d }(nudgeFor)
	nudgeFor = 100 * time.Millisecond
	q = newStuckQP(-1)
	ran := make(chan struct{})
	start = time.Now()
	teardown(q, func() { close(ran) })
	if d := time.Since(start); d < destroyWait || d > destroyWait+time.Second {
		t.Errorf("teardown of a queue pair whose Destroy hangs returned after %v, want %v", d, destroyWait)
	}
	n := q.mods.Load()
	time.Sleep(3 * nudgeMaxStep)
	if m := q.mods.Load(); m != n || n == 0 {
		t.Errorf("nudges: %d by the time teardown returned, %d later (want > 0 and no more)", n, m)
	}
	select {
	case <-ran:
		t.Fatal("after ran before Destroy returned")
	default:
	}
	if WaitTeardowns(10 * time.Millisecond) {
		t.Error("WaitTeardowns reported none running while a Destroy hangs")
	}
	close(q.release)
	select {
	case <-ran:
	case <-time.After(time.Second):
		t.Fatal("after did not run once Destroy returned")
	}
	if !WaitTeardowns(time.Second) {
		t.Error("teardowns still running")
	}
}
