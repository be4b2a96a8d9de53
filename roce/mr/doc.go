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
// Memory windows (mw.go; type 1 and 2B, as rxe has them) lend a peer part of
// a region registered with MWBind under rkeys of their own. A peer may
// withdraw an rkey with a SEND with Invalidate (and this side with a
// LOCAL_INV) only if it is a type 2B window's or the region was registered
// with RemoteInvalidate (xdproce's stand-in for the kernel's fast-registration
// regions, the only other ones rxe invalidates); Table.InvalidateRKey refuses
// any other with ErrAccess.
//
// The engine looks memory up with Table.Local and Table.Remote, which check the
// key, the protection domain (and for a type 2B window the queue pair), the
// access flags and the bounds (with overflow-safe arithmetic), and allocate
// nothing. All methods are safe for concurrent use.
//
// Errors: ErrInvalidKey, ErrOutOfBounds, ErrAccess and ErrPDMismatch are the
// sentinels lookups return; ErrLimit reports a full table; ErrBusy a PD still
// in use; ErrDeallocated a PD, region or window already released; ErrBound a
// region that windows are bound to.
package mr
