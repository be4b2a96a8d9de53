// Package enlarge is the enlargement layer: a message channel over one RC
// connection that starts with small registered buffers and promotes a
// direction to larger ones only when a message needs it, so that many
// connections cost little registered memory.
//
// # Protocol
//
// Each end registers, at start, a receive ring of RingSlots × Ladder[0]
// bytes (default 4 × 512 B) and a MailboxLen-byte (96 B) mailbox, and nothing
// larger: 4 KiB of rings and two mailboxes per connection. A direction's
// state is small, requested or large, and its phase is an index into the
// ladder (default 512 B → 8 KiB → 128 KiB).
//
// The ring grows on demand (Config.GrowSlots, default 16: DESIGN.md's ring,
// 16 KiB a connection once both directions have grown). A sender in phase 0
// that finds all but one slot of the small ring outstanding, with a message
// to send, writes an ENLARGE_REQ for phase 0 (size: that message's) into the
// last slot instead; the receiver answers as for a promotion, with a ring of
// GrowSlots slots of the same size, still phase 0; a second phase-0 request
// is refused. The receiver returns credits every two messages while its ring
// may still grow (every quarter of the slots otherwise), so a peer that
// waits for each answer never reaches the last slot and an idle or
// request-response connection keeps the small ring, while a burst gets the
// grown one after one round trip (BenchmarkStream: 64-byte messages stream at
// the 16-slot ring's rate, about twice the 4-slot ring's).
//
// The sender's side of the small phase has no per-connection buffers: eager
// messages are staged in a Pool of registered slots shared by all channels of
// a protection domain (as MPI libraries share registered send buffers), taken
// per message and given back when the write completes. Per-connection small
// send buffers would double the registered memory of an idle connection
// (16 KiB of rings is what the receivers need). So when a direction is
// promoted out of phase 0 the sender has nothing of its own to free; from
// phase 1 on it owns a send buffer of the current step, and on each later
// promotion it deregisters and frees the previous one (once the writes from
// it have completed).
//
// Every message between the two ends is an RDMA WRITE_WITH_IMM: its
// immediate data says what it is (data, piece, ENLARGE_REQ, ENLARGE_ACK,
// ENLARGE_CREDIT) and how long, and its completion at the receiver is what
// tells the receiver something arrived. Receives are zero-length and only
// counted, so no receive ever points into a buffer that gets freed, and the
// caller reads mailbox memory only after the completion of the write that
// filled it: the handoff from the progress engine's goroutine to the caller's
// is ordered by the completion queue (no data race; see Transport.Load).
//
// Send checks every element of an iovec against the threshold (Threshold %,
// default 90 %, of the current slot). Elements that fit go at once (eagerly)
// into the next slot of the peer's current buffer: the phase-0 ring whose
// address and rkey came in the Endpoint, later the buffer named by the last
// ENLARGE_ACK. At the first element that does not fit, with no request out, an
// ENLARGE_REQ (the phase the largest remaining element needs, and its size)
// goes into a slot of the current ring instead, and Send reports 0 bytes for
// that element and no error. Until the answer, nothing more goes into the old
// ring.
//
// Config.WholeVectorLarge chooses the seed's alternative: when any element of
// the iovec is over the threshold, the request (for the largest element)
// goes first and nothing of the vector is sent, 0 bytes, until the promotion
// is done; then the whole vector goes over the larger buffer.
//
// The receiver handles the request in Progress (every call runs it), between
// its other work: messages still queued from the old ring are copied off it,
// the ring is deregistered (its keys are refused from then on) and freed, the
// larger buffer (LargeSlots × the new step) is registered and an ENLARGE_ACK,
// laid out head flag | address | rkey | length | phase | tail flag, is
// RDMA-written into the sender's mailbox. The sender checks the head, then
// (for at most TailTimeout) the tail, then the whole record (magic, type,
// version, phase, length, rkey); anything less means 0 bytes, no error, no
// data, and the next call looks again; the request is never resent. So that a
// lost or corrupt ack cannot wedge the direction for ever, the calls count
// ack timeouts, periods of AckTimeout (1 s) since the request without a
// valid ack: at MaxAckTimeouts of them (10) Send fails the direction with
// ErrAckTimeout, at once and on every later call (the receiving direction
// goes on; a negative MaxAckTimeouts keeps the seed's endless 0 bytes). On a
// valid ack the sender registers its large send buffer (the previous one is
// deregistered once its writes complete), copies each message in and writes it
// into the receiver's buffer; the receiver copies it to the caller's buffer.
//
// Flow control: the receiver tells the sender how many messages of the
// current phase it has consumed (ENLARGE_CREDIT, every quarter of the slots,
// one update in flight); the sender never has more messages outstanding than
// the peer's buffer has slots, and a receive per slot plus spares for the
// peer's ACK and CREDIT stays posted (Config.QueueDepths sizes the queue
// pair). Credits carry the phase; those of the small ring are all ordered
// before the ENLARGE_ACK of the grown one on the receiver's queue pair, so
// the sender has counted them before it switches rings.
//
// A message larger than the top step goes in top-step pieces, each a
// WRITE_WITH_IMM into the same buffer, the receiver concatenating them. We
// chose pieces over a rendezvous RDMA READ from the sender's memory because a
// rendezvous must register the caller's whole source (registration per
// message, pinned memory growing with the message size: what this layer
// exists to avoid) and costs an extra round trip before the first byte; the
// pieces reuse buffers already registered and need no new control message.
//
// Baseline mode registers a fixed ring (default 32 × 4 KiB per direction,
// 256 KiB per connection counting both ends) and never promotes, for
// comparison.
//
// Control messages begin with the 4-byte Magic and a type byte;
// DescribeControl names them, and DescribePacket, registered with package
// capture, makes xdproce dump print ENLARGE_REQ, ENLARGE_ACK and
// ENLARGE_CREDIT with their fields. The golden captures
// testdata/pcaps/enlarge-*.pcapng show an eager message, a 512 B → 8 KiB
// promotion, a three-phase promotion, an ack whose tail never comes, a
// vector sent whole over the promoted buffer (WholeVectorLarge) and the ring
// growing under a burst (enlarge-ring-grows).
//
// # Use
//
// Send and Recv do not wait for the peer: they return 0 bytes when they
// cannot proceed. The one wait is Send's when it finds an ENLARGE_ACK's head
// in the mailbox but not yet its tail: it spins for the tail up to
// Config.TailTimeout (200 µs by default), then refuses the ack for this call.
// Write and Read (and their Context forms) block on top of them. A Channel is
// built over a Transport, the few verbs it needs from one queue pair; Verbs
// is the Transport over a roce queue pair (see the example). Both ends must
// use the same Config. Methods are safe for concurrent use; a channel does
// its protocol work (answering requests, returning credits and pool slots)
// only inside its own calls, so call Progress on a channel that is otherwise
// idle.
//
// Errors: ErrConfig (wrapped) for a bad configuration; ErrNotConnected,
// ErrClosed; ErrContinuation when a partly sent message is not continued;
// ErrShortBuffer from Read; ErrTransport (wrapped, sticky) when a work request
// fails; ErrAckTimeout (wrapped, sticky for the sending direction) when no
// valid ENLARGE_ACK came within MaxAckTimeouts ack timeouts.
package enlarge
