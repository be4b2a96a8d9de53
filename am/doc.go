// Package am is RMA over active messages: one end writes to and reads from
// memory the other end exposes, by window id, offset and length, without
// ever holding a key of that memory. It runs over one connected RC queue pair
// of package roce.
//
//	ep, err := am.New(q, pd, cq, &am.Config{Inline: 4096})
//	err = ep.Expose(7, buf)            // the target: window 7 is buf
//	h, err := ep.Write(7, off, data)   // the initiator
//	h, err = ep.Read(7, off, dst)
//	for !h.Done() { err = ep.Progress() } // on both ends
//	err = h.Err()
//
// # Messages
//
// Every active message is one RC SEND into a receive buffer the endpoint
// posted; it opens with a 32-byte header (Header: "XDAM", handler, flags,
// status, tag, window, length, offset) that names the handler to run on the
// receiving end. The built-in handlers:
//
//   - AM_WRITE (up to Config.Inline bytes): the target checks the range
//     against the window and copies the payload into it, then answers
//     AM_DONE.
//   - AM_WRITE_RTS (larger writes): the initiator registers its buffer for
//     this tag alone (remote read only) and sends its address and rkey; the
//     target's handler puts a tagged RMA operation in its RMA queue; RMA
//     progress RDMA-READs the buffer into the window and answers
//     AM_DONE(tag); the initiator then deregisters the buffer.
//   - AM_READ: up to Config.Inline bytes come back in AM_READ_REPLY; for more
//     (FlagRMA) the initiator registers its destination buffer for the tag
//     (remote write only), the target's RMA progress RDMA-WRITEs the window's
//     bytes into it and answers AM_DONE(tag).
//   - AM_NAK(status): the request names no exposed window, or a range outside
//     it, or is malformed. The window is not touched; the initiator's Handle
//     fails with ErrUnknownWindow, ErrOutOfRange or ErrBadRequest.
//
// User handlers (ids from HUser up) are registered with Register and run by
// the peer's Call: the payload and the reply (AM_REPLY) travel inline.
//
// A window is registered for local access only, and its keys never leave
// the target: the peer reaches it only through the handlers, which check
// every range. The only keys on the wire are those of the initiator's
// per-tag regions, each valid for one operation.
//
// # Progress
//
// Nothing happens behind the user's back: there is no goroutine. Write and
// Read only queue the operation (the write and read queues); Progress polls
// the completion queue, runs the handlers of what arrived, and runs the
// three progress steps: RMA progress (the target's RMA queue: at most
// Config.MaxRMA RDMA READs and WRITEs in flight), write progress and read
// progress (the initiator's queues: at most Config.Depth requests
// outstanding). Until the target calls Progress its windows do not change
// and the initiator's Handles do not complete, even when the requests have
// arrived (they wait, acknowledged by the transport, in the receive queue).
// Both ends must call Progress. Operations are not ordered against each
// other (an inline write can overtake an RTS write queued in the RMA queue):
// wait for a Handle before an operation that depends on it.
//
// # Where the seed is silent
//
// The seed (an abstract: RMA APIs over active messages with a tagged
// message scheme and read, write and RMA progress modules) does not say
// what the tagged scheme is, whose RMA queue it is, or what the progress
// modules do. Here: the tag is a per-endpoint 64-bit counter the initiator
// assigns; the RMA queue is the target's (the target pulls a large write's
// data and pushes a large read's, so that only per-tag keys of the
// initiator travel); the progress modules are the three steps of Progress
// above, run only from it. An inline write is answered with AM_DONE too, so
// that the initiator learns when the target's handler ran.
//
// # Requirements
//
// The queue pair must allow remote read and remote write (the peer's RMA
// progress reads and writes the per-tag regions), have the queue sizes
// Config.QueueDepths gives, and complete sends and receives on the cq given
// to New, which the endpoint alone polls. Both ends use the same Config
// Depth and Inline. A failed work completion (the queue pair then in the
// error state) is fatal: Progress returns it and every incomplete operation
// fails.
package am
