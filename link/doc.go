// Package link defines Link, the interface through which the RoCE engine moves
// batches of whole Ethernet frames, whatever carries them: AF_XDP sockets
// (link/xsk), kernel UDP sockets (link/udp), a shared-memory port to another
// process on the host (link/shm) or an in-memory pair (link/pipe).
//
// Buffer ownership: frames returned by Receive alias link-owned memory and stay
// valid until the next Receive call; buffers returned by Alloc belong to the
// caller until they are handed back with Send or Free.
//
// Concurrency: one goroutine (the progress engine) owns a Link; only Wake and
// Close may be called from other goroutines.
package link
