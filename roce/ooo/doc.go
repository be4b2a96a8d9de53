// Package ooo is the upper-layer helper of OOO mode (docs/ooo.md, issue 15):
// it makes the transport's unreliable, unordered operations reliable the way
// seed 002 asks, by reissuing a whole operation when its delivered
// completion does not come.
//
// A Writer sends over one or more lanes: an OOO queue pair (roce.OOO, in
// RTS) with its send CQ, the local buffer as registered on that queue pair's
// device, and the peer's region and contexts for that queue pair. Write and
// Read move a byte range: it is cut into operations, each addressed to one
// of the peer's contexts on some lane, several in flight. A Stream is a
// Write that takes ranges while it runs, so that the operations of several
// ranges are in flight together, and reports each delivered in order.
//
//   - Transaction ids: each (local context, remote context) pair is a slot
//     with its own tid, last + 1 for every attempt, so the target resets the
//     context for a reissue and drops the stragglers of an older attempt.
//   - Retry: an attempt without its delivered completion within its timeout
//     is reissued whole with a larger tid, at most
//     Config.MaxTries times. The timeout counts from the attempt's local
//     completion (its last packet handed to the link): the smoothed round
//     trip of delivered attempts plus four deviations, at least
//     Config.Timeout (Config.First before the first sample), backed off by
//     Config.Backoff only once the operation failed more than three times
//     on a lane that delivers nothing (a random loss costs one round-trip
//     timeout), at most
//     Config.MaxTimeout. A delivered completion whose tid is not the slot's
//     current one is ignored and counted (Stats.StaleCompletions); when it
//     is the attempt just before (Stats.Late), its round trip still feeds
//     the estimate and the failure becomes a success in the loss estimate.
//   - Sizing: an operation of n packets arrives whole only if its n packets
//     and its completion all do: probability (1−p)^(n+1) at packet loss p.
//     The writer estimates p from its own outcomes (the maximum-likelihood
//     p over its last 256 operations, each of n+1 packets delivered or
//     not: sizing.go) and keeps every operation at OpPackets(p,
//     Config.Success, Config.MaxPackets) packets, so each succeeds with
//     probability at least Config.Success; a timed-out operation larger
//     than that is reissued as operations of the current size. At most
//     Config.Window packets are in flight, over as many operations as the
//     peer gave contexts: one timeout holds one context, not the pipe.
//   - Striping and failover: operations go to the lanes round robin; a lane
//     whose attempts time out Config.DownAfter times in a row with no
//     delivery in between is taken out for the rest of the call and its
//     operations are reissued on the others (Stats.Failovers).
//   - Cancel: when the context of a call ends, the local contexts of the
//     operations still in flight are released (late completions to them are
//     dropped by the transport as stale_ctx) and fresh ones acquired in
//     their place; Close releases them all.
package ooo
