// Package pipe provides a connected pair of in-memory Links with seeded,
// deterministic fault injection (loss, reorder, duplication, corruption,
// delay) in each direction. It is the fake link the RoCE engine is tested and
// benchmarked over.
//
// Frames sent on one end are copied into a bounded receive queue of the other
// end, like a NIC ring: when the receiver does not keep up, frames are dropped
// and counted (Stats.Overflow), never queued without bound. Faults are decided
// by a PRNG seeded from Config.Seed, so the same sequence of Send calls meets
// the same faults on every run (frames delayed by time are released when their
// time has come, which depends on the clock).
//
// Closing: Close on one end makes every later call on that end return
// link.ErrClosed. The other end does not see an error: frames it sends are
// dropped (Stats.PeerClosed) and it receives nothing more, as with a cable
// pulled at the far side.
//
// Concurrency: as for every link.Link, one goroutine owns each end; Wake,
// Close, Stats and SetFaults are safe from any goroutine. The two ends may be
// owned by different goroutines.
package pipe
