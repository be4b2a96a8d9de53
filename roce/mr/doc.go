// Package mr holds protection domains and memory regions: caller-owned
// []byte buffers registered with access flags and looked up by random 32-bit
// keys.
//
// A Table (one per device) owns every key. Keys are drawn from crypto/rand
// (or a caller-supplied source, for tests), are never 0 and are unique, so a
// remote peer guessing an rkey hits a live region with probability about
// regions/2^32. Deregistering a region removes its keys from the table at
// once: a later lookup with a stale key fails with ErrInvalidKey, and the
// rkey is not issued again (the table remembers the last DefaultRetiredKeys
// released rkeys).
//
// A peer may withdraw an rkey with a SEND with Invalidate only if the region
// was registered with RemoteInvalidate (xdproce's stand-in for the
// fast-registration regions of ibv_alloc_mr, the only ones rxe lets a peer
// invalidate); Table.InvalidateRKey refuses any other with ErrAccess.
//
// The engine looks memory up with Table.Local and Table.Remote, which check the
// key, the protection domain, the access flags and the bounds (with
// overflow-safe arithmetic), and allocate nothing. All methods are safe for
// concurrent use.
//
// Errors: ErrInvalidKey, ErrOutOfBounds, ErrAccess and ErrPDMismatch are the
// sentinels lookups return; ErrLimit reports a full table; ErrBusy a PD still
// in use; ErrDeallocated a PD or region already released.
package mr
