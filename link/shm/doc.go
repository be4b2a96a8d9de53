// Package shm is a link.Link between two processes on one host over shared
// memory: the port the xdproce daemon gives each local client.
//
// A port is a sealed memfd holding, for each direction, a single-producer
// single-consumer ring of frame descriptors and a frame area, plus two
// eventfds (one per direction) and a unix socket pair. NewPort creates it and
// returns the creator's end (the daemon's) and the descriptors of the other
// end; SendPort passes those over a unix socket with SCM_RIGHTS, ReceivePort
// takes them in the other process, and Attach maps them into the attaching
// end. Both ends are Links (and link.Napper): the daemon's Send reaches the
// client's Receive and the other way round.
//
// Data path: Alloc hands out buffers in this end's frame area; Send writes
// one descriptor (offset, length) per frame into the ring and publishes the
// ring's tail with one atomic store — no copy. Receive lends frames in place;
// the next Receive publishes the ring's head, which hands their buffers back
// to the sender. Heads and tails are free-running uint32s on cache lines of
// their own. A consumer about to sleep raises a need-wakeup flag and looks
// once more; a producer signals the eventfd only when it finds the flag up
// (and clears it), so a busy stream makes no system call per frame. Nothing
// is allocated per frame.
//
// Hostile peer: the other process can write anything into the shared memory
// at any time. Neither end trusts it: every index and descriptor is copied
// out of the mapping once (one atomic load of an aligned word) and then
// checked. A tail behind the consumer's head or more than the ring size
// ahead of it, or a head outside what was sent, is ignored and counted
// (Stats.BadIndexes); a descriptor whose offset is not a slot of the frame
// area or whose length is under 14 bytes or over MaxFrame is dropped and
// counted (Stats.BadDescs). Which buffer sits at which ring position is kept
// in the sender's private memory, never read back. The header is read once
// by Attach and checked against the memfd's size; the creator never reads it
// again. The memfd is sealed against shrinking and growing (and Attach
// refuses one that is not), so a peer cannot make our accesses fault. Frame
// bytes lent by Receive remain shared: a consumer parsing them must read
// each field once (or copy the frame) when its peer is not trusted.
//
// Peer death: each end holds one end of a socket pair created with the port;
// its only other copy is the peer's. When the peer closes its Link, or its
// process exits or is killed, the socket reads end of file; Wait and Nap
// poll it beside the eventfd and from then on return ErrPeerGone (which
// matches link.ErrClosed) once the ring is drained, and Send returns it.
// Receive keeps returning what is queued, then nothing, without error (the
// conformance suite's rule for a closed peer). The creator must therefore
// not keep its copy of the attaching end's descriptors (SendPort closes
// them), and neither side may leak them into another process (they are
// close-on-exec). The detection is as fast as the kernel closing the dead
// process's descriptors: no timeout, no polling of the peer's PID.
//
// Concurrency: as for every link.Link, one goroutine owns each end; Wake,
// Close, Stats and PeerGone are safe from any goroutine. Close waits for a
// call in progress on the owner goroutine to leave the mapping before
// unmapping it.
//
// Linux only: elsewhere NewPort and Attach return an error wrapping
// link.ErrNotSupported.
package shm
