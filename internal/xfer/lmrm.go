package xfer

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/lmrm"
	"github.com/xdproce/xdproce/roce"
)

// RC transfers on an lmrm pool (cm.CapLMRM). The side that has the content
// is the pool's requester, the side that stores it its provider: for put the
// client writes into the server's pool, for get the server writes into the
// client's. The control connection carries the request and the accept (the
// queue pairs, and the server's limits SlotSize × Slots), for get_lmrm the
// client's ready, then only the end message and the verdict: the LMRM_ALLOC,
// its answer, the data (one WRITE WITH IMMEDIATE per slot, the immediate
// naming pool and slot) and the batched LMRM_RELEASEs go on the queue pair.
// The data arrives in the order it was written (RC), so the receiver appends
// each slot at its running offset.
//
// The sender sends the end message as soon as its last write is posted, not
// once the writes are acknowledged: the receiver, which waits for the data
// the end announces anyway, then has it when the last slot lands instead of
// a round trip and a wake-up later. A write that fails after the end is told
// to the receiver by an error message (lmrmDrain), which ends its wait.
const (
	msgPutLMRM = "put_lmrm" // client → server: store NAME, written into the server's pool
	msgGetLMRM = "get_lmrm" // client → server: send NAME, written into the client's pool
)

// OpLMRM is Result.Op of a transfer on an lmrm pool.
const OpLMRM = "RDMA WRITE WITH IMMEDIATE (lmrm)"

// endDataWait bounds how long a receiver waits, once the end message is in,
// for more of the data it announces: the sender's writes are still on their
// way then, and a queue pair that stops making progress gives up well
// within it (retries exhausted: the sender then says so).
const endDataWait = 10 * time.Second

// newLMRMRequesterQP makes an RC queue pair sized for a requester with
// depth writes in flight, and the requester's configuration; the caller
// connects it and then makes the requester.
func newLMRMRequesterQP(dev *roce.Device, depth int, local net.Addr) (*qpConn, *lmrm.Config, error) {
	cfg := &lmrm.Config{Depth: depth}
	send, recv, cq := cfg.QueueDepths()
	q, err := newBareQP(dev, roce.RC, cq, send, recv, local)
	return q, cfg, err
}

// newLMRMProviderQP makes an RC queue pair sized for a provider granting at
// most maxBytes, and the provider's configuration; the caller connects it
// and then makes the provider.
func newLMRMProviderQP(dev *roce.Device, maxBytes int, local net.Addr) (*qpConn, *lmrm.ProviderConfig, error) {
	cfg := &lmrm.ProviderConfig{MaxBytes: uint64(maxBytes)}
	send, recv, cq := cfg.QueueDepths()
	q, err := newBareQP(dev, roce.RC, cq, send, recv, local)
	return q, cfg, err
}

// lmrmWrite asks the provider for slots × slotSize bytes (one LMRM_ALLOC)
// and writes size bytes read from r into the pool, one WRITE WITH IMMEDIATE
// per slot, adding them to h (each slot once its write is posted). It waits
// in the requester when every slot is in flight, and returns once the last
// write is posted; lmrmDrain waits for them to complete.
func lmrmWrite(ctx context.Context, lr *lmrm.Requester, slotSize, slots int, r io.Reader, size int64, h hash.Hash, progress func(done, total int64)) error {
	if err := lr.Alloc(uint64(slotSize)*uint64(slots), uint32(slotSize)); err != nil {
		return err
	}
	for lr.Stats().Pools == 0 {
		if err := lr.Wait(ctx); err != nil {
			return err
		}
	}
	var off int64
	for off < size {
		s, err := lr.Reserve()
		if errors.Is(err, lmrm.ErrExhausted) {
			if err := lr.Wait(ctx); err != nil {
				return err
			}
			continue
		} else if err != nil {
			return err
		}
		buf, err := lr.Staging(s)
		if err != nil {
			return err
		}
		buf = buf[:min(int64(len(buf)), size-off)]
		if _, err := io.ReadFull(r, buf); err != nil {
			return &readError{off: off, err: err}
		}
		// A cancelled transfer stops here, even while slots keep coming
		// back without a wait (which would see it): no slot is written
		// after the cancellation is known.
		if err := ctx.Err(); err != nil {
			return err
		}
		for {
			if err = lr.Write(s, buf); !errors.Is(err, lmrm.ErrBusy) {
				break
			}
			if err = lr.Wait(ctx); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
		// Hash the slot while its write is on the wire: the staging buffer
		// stays as it is until the slot comes back, which is after this
		// goroutine reserves it again.
		h.Write(buf)
		off += int64(len(buf))
		if progress != nil {
			progress(off, size)
		}
		// Take the releases that came meanwhile, without waiting.
		if err := lr.Progress(); err != nil {
			return err
		}
	}
	return nil
}

// lmrmDrain waits, once the end message is sent, for lr's writes to
// complete (be acknowledged). When one fails it tells the receiver, which
// would otherwise wait for data that is not coming, and returns the failure.
// When ctx ends first (the receiver's verdict came, or the connection
// ended) it returns nil: the wait for the verdict says why.
func lmrmDrain(ctx context.Context, c *ctrl, lr *lmrm.Requester) error {
	for lr.Stats().Writing > 0 {
		if err := lr.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			err = fmt.Errorf("a write failed after the end message: %w", err)
			c.send(&message{Type: msgError, Error: err.Error()})
			return err
		}
	}
	return nil
}

// A readError is a failure to read the content being sent.
type readError struct {
	off int64
	err error
}

func (e *readError) Error() string { return fmt.Sprintf("at %d: %v", e.off, e.err) }
func (e *readError) Unwrap() error { return e.err }

// A sink appends what a provider delivers to a file, in order, and hashes
// it: as it goes, or, with back, on a goroutine that reads the file back
// (hashBehind). The first failure stops it (err); later deliveries are
// dropped. Call hashed before reading h.
type sink struct {
	w        io.WriterAt
	h        hash.Hash
	back     *backHash
	size     int64 // what the sender announced
	next     int64 // the bytes appended
	err      error
	progress func(done, total int64)
}

// hashBehind makes k hash on a goroutine of its own, reading back from r
// what k wrote to its w (the same file), so that a slot goes back to the
// sender as soon as it is written. The caller must call stopHash when done
// (after hashed on success).
func (k *sink) hashBehind(r io.ReaderAt) { k.back = newBackHash(r, k.h) }

// hashed waits until every byte appended is in h; it returns the hasher's
// failure (a read back that failed).
func (k *sink) hashed() error {
	if k.back == nil {
		return nil
	}
	return k.back.wait()
}

// stopHash ends hashBehind's goroutine (at once when hashed did not wait for
// it: the transfer failed).
func (k *sink) stopHash() {
	if k.back != nil {
		k.back.stop()
	}
}

func (k *sink) deliver(_ uint8, _ uint32, b []byte) {
	if k.err != nil {
		return
	}
	if k.next+int64(len(b)) > k.size {
		k.err = fmt.Errorf("%d bytes written after %d of %d", len(b), k.next, k.size)
		return
	}
	if k.back == nil {
		k.err = appendSlot(k.w, k.h, b, k.next)
	} else {
		_, k.err = k.w.WriteAt(b, k.next)
	}
	if k.err != nil {
		return
	}
	k.next += int64(len(b))
	if k.back != nil {
		k.back.written(k.next)
	}
	if k.progress != nil {
		k.progress(k.next, k.size)
	}
}

// lmrmReceive drives p until the sender's end message arrives on c, then
// until the data that message announces is in. It returns the end message.
// A message other than end, the sender's error (before the end or after
// it), the connection's end or a failure of p or k ends it with the reason;
// no more data for endDataWait after the end ends the wait, and the
// verdict says how much is missing.
func lmrmReceive(ctx context.Context, c *ctrl, p *lmrm.Provider, k *sink) (message, error) {
	got := make(chan message, 1)
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	dctx, dstop := context.WithCancelCause(ctx) // the wait after the end
	defer dstop(nil)
	go func() {
		var m message
		if err := c.recv(&m); err != nil {
			stop(err)
			return
		}
		got <- m
		stop(nil)
		if m.Type != msgEnd {
			return
		}
		// After the end the sender only speaks when a write fails; the
		// connection's end (after the verdict, or a sender gone) ends this.
		if err := c.recv(&m); err != nil {
			dstop(err)
		} else if m.Type == msgError {
			dstop(remoteError(&m))
		} else {
			dstop(fmt.Errorf("unexpected %q after the end", m.Type))
		}
	}()
	for wctx.Err() == nil && k.err == nil {
		if err := p.Wait(wctx); err != nil && wctx.Err() == nil {
			return message{}, err
		}
	}
	if k.err != nil {
		return message{}, k.err
	}
	var m message
	select {
	case m = <-got:
	default:
		return message{}, context.Cause(wctx)
	}
	switch m.Type {
	case msgEnd:
	case msgError:
		return m, remoteError(&m)
	default:
		return m, fmt.Errorf("unexpected %q during the transfer", m.Type)
	}
	quiet := time.AfterFunc(endDataWait, func() { dstop(errQuiet) })
	defer quiet.Stop()
	for k.next < min(m.Size, k.size) && k.err == nil {
		before := k.next
		if err := p.Wait(dctx); err != nil {
			if errors.Is(context.Cause(dctx), errQuiet) && ctx.Err() == nil {
				break // the verdict says how much is missing
			}
			if dctx.Err() != nil {
				return m, context.Cause(dctx)
			}
			return m, err
		}
		if k.next > before {
			quiet.Reset(endDataWait)
		}
	}
	return m, k.err
}

// errQuiet: no data came for endDataWait after the end message.
var errQuiet = errors.New("no data for " + endDataWait.String() + " after the end message")

// Between an xdproce with lmrm and one from before it, the RC transfer
// falls back to the slot protocol (a control message per slot: client.go,
// get.go, server.go), with one line at each end saying so. The slot
// protocol stays in the tree as --mode ooo's carrier, so speaking it to an
// older peer costs no code of its own, while refusing would break transfers
// between mixed versions that worked before.

// slotNotice is the client's line: the server lacks cm.CapLMRM.
func slotNotice(o *Options) {
	o.Log.Warn(fmt.Sprintf("the server does not offer lmrm (capability %q: an xdproce from before it): using the slot protocol, a control message per slot", cm.CapLMRM))
}

// slotNotice is the server's line, for a put or get from a client that
// lacks cm.CapLMRM.
func (s *Server) slotNotice(conn *cm.Conn) {
	if !conn.PeerHas(cm.CapLMRM) {
		s.Options.withDefaults().Log.Warn(fmt.Sprintf("the client does not offer lmrm (capability %q: an xdproce from before it): serving it the slot protocol, a control message per slot", cm.CapLMRM),
			"peer", conn.RemoteAddr().String())
	}
}
