package xfer

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/ooo"
)

// The conditional commit of put_ooo (docs/ooo.md, "The conditional commit
// of send --mode ooo"). A put in OOO mode does not end with an end message
// sent once every slot is delivered: the client's stream ends with a
// commit record (the file's size and SHA-256) that its engine sends itself,
// as an OOO WRITE conditional on the count of the stream's operations
// delivered, the moment the last of their completion packets arrives
// (roce/ooo's StreamCommit). The record lands in the tail of the server's
// staging buffer through a context the server offered for it alone
// (accept's commit_ctx, commit_off), with NotifyBoth: the server's
// completion of that context is the end. The server applies it once the
// data messages before it are in (the last may still be on its way over
// TCP), verifies and renames, and answers ok (or error) over the control
// connection as for an end message.
const (
	// msgCommit is the commit record as the server's loop sees it (never
	// sent on the control connection).
	msgCommit = "commit"
	// commitLen is the record's size; commitMagic its first 4 bytes.
	commitLen   = 48
	commitMagic = "XDCM"
)

// The record (little-endian): magic[4] | reserved[4] | size u64 |
// sha256[32].
func encodeCommit(b []byte, size int64, sum []byte) {
	copy(b, commitMagic)
	clear(b[4:8])
	binary.LittleEndian.PutUint64(b[8:], uint64(size))
	copy(b[16:48], sum)
}

func decodeCommit(b []byte) (message, error) {
	if len(b) < commitLen || string(b[:4]) != commitMagic {
		return message{}, fmt.Errorf("commit record: bad magic %q", b[:min(4, len(b))])
	}
	size := int64(binary.LittleEndian.Uint64(b[8:]))
	return message{Type: msgCommit, Size: size, Off: size, SHA256: hex.EncodeToString(b[16:48])}, nil
}

// commitArea is the record's offset in a staging buffer (its tail).
func (q *qpConn) commitArea() int { return len(q.buf) - commitLen }

// offerCommit, for an OOO put, acquires the context the client's commit
// goes to and puts it and the record's place in acc.
func (q *qpConn) offerCommit(acc *message) error {
	if q.qp.Type() != roce.OOO {
		return nil
	}
	c, err := q.qp.AcquireContexts(1)
	if err != nil {
		return err
	}
	q.commit = c[0]
	acc.CommitCtx, acc.CommitOff = uint32(c[0]), int64(q.commitArea())
	return nil
}

// received is one message for the server's loop, or why none came.
type received struct {
	m   message
	err error
}

// commitRecv returns the server's receive for a put: with a commit context
// (OOO), the control connection's messages merged with the commit, which a
// goroutine takes from the completion queue; else c.recv. stop ends the
// goroutines.
func (q *qpConn) commitRecv(ctx context.Context, c *ctrl) (recv func(*message) error, stop func()) {
	if q.commit == 0 {
		return c.recv, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan received, 2)
	deliver := func(r received) bool {
		select {
		case ch <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		for {
			var m message
			err := c.recv(&m)
			if !deliver(received{m, err}) || err != nil {
				return
			}
		}
	}()
	go func() {
		var wcs [8]roce.WC
		for {
			n, err := q.cq.Wait(ctx, wcs[:])
			if err != nil {
				return
			}
			for _, wc := range wcs[:n] {
				if wc.Opcode == roce.WCOOOTarget && wc.Ctx == q.commit && wc.Status == roce.WCSuccess {
					// Retire the context before reading the record: a
					// commit the client reissued (its delivered
					// completion was late) is then dropped as stale
					// instead of placing the same bytes again while
					// they are read.
					var m message
					err := q.qp.ReleaseContexts([]roce.Ctx{q.commit})
					if err == nil {
						m, err = decodeCommit(q.buf[q.commitArea():])
					}
					deliver(received{m, err})
					return
				}
			}
		}
	}()
	recv = func(m *message) error {
		select {
		case r := <-ch:
			*m = r.m
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The control connection's reader ends at stop, or when the
	// connection closes (after the loop); the completion watcher at stop.
	return recv, cancel
}

// startStream starts the put's stream: ending with the commit when the
// server offered a commit context (acc), else a plain one.
func (q *qpConn) startStream(ctx context.Context, w *ooo.Writer, acc *message, delivered func(local, remote uint64, n int) error) (*ooo.Stream, error) {
	if acc.CommitCtx == 0 {
		return w.Stream(ctx, roce.NotifyInitiator, delivered)
	}
	return w.StreamCommit(ctx, delivered, ooo.Commit{Local: uint64(q.commitArea()), Remote: uint64(acc.CommitOff),
		Len: commitLen, Ctx: roce.Ctx(acc.CommitCtx)})
}

// sendCommit ends a put whose stream ends with the commit: it writes the
// record (size bytes, sum their SHA-256), closes the stream (which posts
// the commit and returns once it is delivered) and waits for the server's
// verdict on final; it returns the SHA-256. The verdict may come before the
// commit's delivered completion (that completion packet lost: the server
// has committed and closed its queue pair, so a reissued commit would never
// be answered): then the stream is cancelled (cancel: its context) and the verdict
// stands.
func (q *qpConn) sendCommit(ctx context.Context, st *ooo.Stream, cancel func(), size int64, sum []byte, final <-chan message) (string, error) {
	encodeCommit(q.buf[q.commitArea():], size, sum)
	done := make(chan error, 1)
	go func() { done <- st.Close() }()
	hexSum := hex.EncodeToString(sum)
	select {
	case err := <-done:
		if err != nil {
			return "", ctxErr(ctx, fmt.Errorf("write to peer: %w", err))
		}
		return putVerdict(ctx, hexSum, final)
	case m := <-final:
		cancel()
		<-done
		verdict := make(chan message, 1)
		verdict <- m
		return putVerdict(ctx, hexSum, verdict)
	}
}
