// Package qp implements RoCEv2 queue pairs: the ibverbs state machine, work
// requests, completion queues, and the three engines of a reliable connection
// (requester, responder, completer, as in Linux rxe), plus unreliable datagram
// (UD) and unreliable connection (UC) queue pairs. It consumes and produces
// decoded wire.Packets and raw frames; it knows nothing of sockets or links.
//
// # Concurrency
//
// Application calls (PostSend, PostRecv, Modify, State, CQ.Poll, CQ.Wait) are
// safe from any goroutine. Posting copies the work request into a ring that
// was preallocated at New; the engine consumes it. The engine calls
// (Receive, Progress) must all come from one goroutine, the device's progress
// goroutine: the engines' state is owned by it and takes no lock per packet.
// Post and Modify ring the doorbell set with SetDoorbell so that the device
// calls Progress soon.
//
// # Buffers
//
// Data moves between registered memory (package mr) and frames: a transmitted
// frame is built in a buffer from Output.TxBuffer, headers and payload written
// in place; a received packet's payload is copied into registered memory
// before Receive returns, so the frame may be reused at once. Registered
// memory is looked up by key for every packet, so a deregistered region is
// refused from the next packet on.
//
// # Errors
//
// Post and Modify return errors for bad requests (wrong state, full queue,
// bad attributes): ErrState and ErrQueueFull are the sentinels to branch on.
// Everything that goes wrong after a post is reported as a work completion
// with an ibverbs status (WCRemAccessErr, WCRetryExcErr, ...); a completion
// queue that overflows reports ErrCQOverflow from Poll and Wait.
package qp
