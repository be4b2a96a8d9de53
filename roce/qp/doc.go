// Package qp implements RoCEv2 queue pairs: the ibverbs state machine, work
// requests, completion queues, and the three engines of a reliable connection
// (requester, responder, completer, as in Linux rxe), plus unreliable datagram
// (UD) and unreliable connection (UC) queue pairs, and xdproce's OOO queue
// pairs (out-of-order RDMA over datagrams, with the device's ContextPool;
// ooo*.go, docs/ooo.md). It consumes and produces decoded wire.Packets and raw
// frames; it knows nothing of sockets or links.
//
// # Concurrency
//
// Application calls (PostSend, PostRecv, Modify, State, CQ.Poll, CQ.Wait) are
// safe from any goroutine. Posting copies the work request into a ring
// slot; the engine consumes it. The rings start small and grow (doubling,
// up to MaxSendWR/MaxRecvWR) when a post finds them full, without moving
// a WQE the engine may be reading (ring.go). The engine calls
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
// # Engines
//
// Receive hands one decoded packet to the responder (requests) or the
// completer (ACKs, NAKs, READ responses, atomic ACKs); it changes state and
// produces completions but sends nothing. Progress sends: queued READ
// responses and atomic ACKs, the pending ACK or NAK (one per batch of
// Receives: ACKs are coalesced), then new and resent requests, and it fires
// the timers. The device calls Progress for every QP that received frames,
// whose doorbell rang, or whose deadline (Progress's result) has come.
//
// Reliability is go-back-N as IBA specifies it for RC: the responder
// executes in PSN order, NAKs the first gap once and drops until the
// missing PSN arrives; the requester resends from the NAKed PSN, from the
// oldest unacknowledged PSN when the local ACK timer fires (retry_cnt
// times, then IBV_WC_RETRY_EXC_ERR), after an RNR NAK's timer (rnr_retry
// times, 7 = forever), or when a response shows an earlier one was lost
// (once per hole, not once per packet past it). As in rxe, a sequence NAK
// spends retry_cnt only when it starts a retry sequence, so duplicated or
// reordered NAKs cost nothing; progress restores retry_cnt. The responder
// answers requests, repeated ones included, in the order they arrive. It
// keeps the last max_dest_rd_atomic READ/atomic requests for replay; a new
// one that finds the oldest's response not yet sent comes from a requester
// beyond max_dest_rd_atomic and is NAKed as an invalid request (QP to
// Error). A SEND with Invalidate may withdraw only the rkey of a type 2B
// memory window bound to this queue pair or of a region registered with
// mr.RemoteInvalidate; any other fails the receive WQE with
// IBV_WC_REM_INV_REQ_ERR and the QP, as in rxe. Window binds and local
// invalidations are local work requests (mw.go).
// Two additions keep lossy paths usable without changing the wire: the send
// window starts at 128 PSNs and doubles per round trip, halves on loss (not
// below the path's estimated bandwidth-delay product, 12 to 32 PSNs) and
// grows back by one PSN per window acknowledged, and after a loss only a
// timer found restarts small and doubles again (Config.FixedWindow turns
// this off); and an ACK asked for (AckReq)
// that is overdue by twice the measured round trip triggers a resend
// without waiting for the local ACK timeout (this does not spend
// retry_cnt). Round trips are sampled as TCP does (never on a resent
// packet whose original may be answered), and also on the first packet
// resent after a NAK, which only the resent copy can answer.
//
// # Errors
//
// Post and Modify return errors for bad requests (wrong state, full queue,
// bad attributes): ErrState and ErrQueueFull are the sentinels to branch on.
// Everything that goes wrong after a post is reported as a work completion
// with an ibverbs status (WCRemAccessErr, WCRetryExcErr, ...); a completion
// queue that overflows reports ErrCQOverflow from Poll and Wait.
package qp
