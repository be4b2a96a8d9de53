package cli

import (
	"os"
	"runtime"
	"sync"
)

// engineProcs gives the Go runtime a P for each of a device's engines and
// one more, above its default (the CPUs this process may use), unless the
// user set GOMAXPROCS. An engine waits for frames in ppoll, a system call
// that keeps its P: while it sleeps, a transfer's other goroutines (the
// file's reads and writes, the SHA-256, the control connection's reader)
// share the P that is left, and a goroutine made ready meanwhile — the
// control message that ends a get, a completion's waiter — waits until the
// runtime's monitor takes the sleeping engine's P back, up to 10 ms once
// the monitor has backed off. Measured on the 2-vCPU test VM
// (docs/status.md, "lmrm get against the READ get: where the time goes"):
// an lmrm get through the test relay waited 1–14 ms between the last slot
// and the end message; at GOMAXPROCS 4 the get was 0.970 of the slot
// protocol's READ get (244 rounds paired, 95 % 0.953–0.987) against 0.943
// at the default 2 (122 rounds), and no better at 3 (0.949), at the same
// CPU. A process with
// several devices open counts the engines of all; release, called when the
// device closes, takes its engines off again (and restores the default
// when none is left). It returns the value set (0: left alone, the user's
// GOMAXPROCS stands) for the log.
func engineProcs(engines int) (n int, release func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return 0, func() {}
	}
	engines = max(engines, 1)
	procs.mu.Lock()
	defer procs.mu.Unlock()
	if procs.engines == 0 {
		procs.base = runtime.GOMAXPROCS(0)
	}
	procs.engines += engines
	n = procs.set()
	var once sync.Once
	return n, func() {
		once.Do(func() {
			procs.mu.Lock()
			defer procs.mu.Unlock()
			procs.engines -= engines
			procs.set()
		})
	}
}

// procs is what engineProcs counted: the runtime's default when the first
// device opened, and the engines of the devices open.
var procs procCount

type procCount struct {
	mu            sync.Mutex
	base, engines int
}

// set makes GOMAXPROCS the default plus a P per engine open and one more;
// the default alone when no engine is. p.mu is held.
func (p *procCount) set() int {
	n := p.base
	if p.engines > 0 {
		n += p.engines + 1
	}
	runtime.GOMAXPROCS(n)
	return n
}
