package xfer

import (
	"sync"
	"time"

	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// Queue pair teardown that does not depend on roce's QP.Destroy returning
// promptly. Destroy calls Device.sync, which waits until the engine's round
// counter has grown by two since it read it but wakes the engine once; when
// the round that Destroy's own move to the error state caused has already
// been counted, the second round never comes on an idle device (seen over
// AF_XDP, where an idle engine sleeps until a frame or a wake-up:
// TestPrivilegedTeardownXSK fails without what follows). teardown therefore
// runs Destroy in the background and nudges the engine while it runs: moving
// the queue pair to the error state again changes nothing for a queue pair
// already there but rings its doorbell, which runs one more round. The caller
// waits at most destroyWait; the nudging stops after nudgeFor, so a Destroy
// that never returns (whatever the cause) costs one parked goroutine and no
// CPU.
const (
	destroyWait  = 500 * time.Millisecond
	nudgeFirst   = 500 * time.Microsecond
	nudgeMaxStep = 50 * time.Millisecond
)

// nudgeFor bounds the nudging of one teardown (a variable for tests).
var nudgeFor = 10 * time.Second

// destroyer is what teardown needs of a queue pair (a *roce.QP).
type destroyer interface {
	Destroy() error
	Modify(attr *roce.Attr, mask roce.AttrMask) error
}

// teardowns counts the queue pair teardowns still running.
var teardowns sync.WaitGroup

// teardown destroys q, then runs after; it returns when both are done or
// after destroyWait, whichever comes first.
func teardown(q destroyer, after func()) {
	done := make(chan struct{})
	teardowns.Add(1)
	go func() {
		defer teardowns.Done()
		q.Destroy()
		after()
		close(done)
	}()
	go nudge(q, done, nudgeFor)
	select {
	case <-done:
	case <-time.After(destroyWait):
	}
}

// nudge rings q's doorbell with backoff until done is closed or limit has
// passed.
func nudge(q destroyer, done <-chan struct{}, limit time.Duration) {
	step := nudgeFirst
	t := time.NewTimer(step)
	defer t.Stop()
	stop := time.Now().Add(limit)
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if time.Now().After(stop) {
			return
		}
		q.Modify(&roce.Attr{State: qp.Error}, qp.AttrState)
		step = min(2*step, nudgeMaxStep)
		t.Reset(step)
	}
}

// WaitTeardowns waits up to d for the queue pair teardowns still running in
// the background and reports whether none is left. Call it before closing a
// device whose queue pairs this package has used, so they are gone first
// (closing the device ends any teardown anyway).
func WaitTeardowns(d time.Duration) bool {
	done := make(chan struct{})
	go func() { teardowns.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
