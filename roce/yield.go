package roce

import (
	"runtime"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/qp"
)

// Before a wait (not a nap, which ends by itself within RxCoalesce), an
// engine lets a goroutine that a completion woke since it last slept run on
// its thread first, when every other P is held by an engine asleep. The
// wait is a system call that keeps the engine's P, and the woken goroutine
// sits in that P's run queue: with a P free an idle thread takes it within
// a few microseconds, but with every P so held (several devices in one
// process: two link/udp devices, or a daemon's clients in its own process
// as its benchmarks run) it waits for the runtime's monitor to take a P
// back, 150-450 µs here. Measured on the 2-vCPU test VM (docs/status.md,
// issue 17): an 8-byte SEND round trip between two clients of a daemon
// 391-418 µs p50, 130-159 with this. Yielding before every wait, whether
// or not a P was free, cost bench write 17 % (one device: without the
// yield its woken goroutine runs on the free P beside the engine, with it
// after the engine). Not for an engine locked to its thread (Options.CPUs):
// its Gosched hands the P to another thread and back, two wake-ups.

// enginesAsleep counts the process's engines blocked in their link's Wait
// or Nap (each holding a P meanwhile).
var enginesAsleep atomic.Int32

// yieldToWoken yields the engine's P to what a completion woke, as above;
// woke is qp.WokeWaiters when the engine last went to sleep.
func (e *engine) yieldToWoken(woke *uint64) {
	w := qp.WokeWaiters()
	if w == *woke {
		return
	}
	*woke = w
	if len(e.cpus) == 0 && int(enginesAsleep.Load())+1 >= runtime.GOMAXPROCS(0) {
		runtime.Gosched()
	}
}
