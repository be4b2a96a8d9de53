package xfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// Get fetches the file name from the server at the other end of conn into
// dev (written into this side's lmrm pool, or by RDMA READ from a server
// from before lmrm; through an enlargement channel when opts.Enlarge is set),
// writing it to dst: first under a temporary name in dst's directory, renamed
// to dst only once the SHA-256 matches the server's. conn is closed on
// return.
func Get(ctx context.Context, dev *roce.Device, conn *cm.Conn, name, dst string, opts *Options) (res Result, err error) {
	o := opts.withDefaults()
	if err := ValidName(name); err != nil {
		conn.Close()
		return res, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c := newCtrl(ctx, conn)
	defer c.close()

	tmp, err := createTemp(dst)
	if err != nil {
		return res, err
	}
	defer func() {
		if !tmp.committed {
			tmp.discard()
		}
	}()
	if o.OOO != nil {
		return getOOO(ctx, c, dev, name, tmp, &o)
	}
	if o.Enlarge != nil {
		return getEnlarge(ctx, cancel, c, dev, name, tmp, &o)
	}
	return getRC(ctx, c, dev, name, nil, tmp, &o)
}

// getRC fetches name (or the span of it sp asks for) into dst: written
// into this side's lmrm pool by a server that offers cm.CapLMRM (lmrm_get.go),
// else by RDMA READ (getSlots).
func getRC(ctx context.Context, c *ctrl, dev *roce.Device, name string, sp *Span, dst contentDst, o *Options) (Result, error) {
	if c.c.PeerHas(cm.CapLMRM) {
		return getLMRM(ctx, c, dev, name, sp, dst, o)
	}
	slotNotice(o)
	return getSlots(ctx, c, dev, name, sp, dst, o)
}

// getSlots is getRC by the slot protocol: RDMA READ from the server's
// staging buffer, a data and a free message per slot.
func getSlots(ctx context.Context, c *ctrl, dev *roce.Device, name string, sp *Span, dst contentDst, o *Options) (res Result, err error) {
	q, err := newQPConn(dev, roce.RC, o.SlotSize, o.Slots, roce.LocalWrite, c.c.LocalAddr())
	if err != nil {
		return res, err
	}
	defer q.close()
	req := &message{Type: msgGet, Version: ProtocolVersion, Name: name, SlotSize: q.slotSize, Slots: q.slots, Span: sp}
	q.offer(o.Connect)
	acc, err := q.ask(c, req)
	if err != nil {
		return res, err
	}
	if acc.SlotSize <= 0 || acc.Slots <= 0 || acc.SlotSize > q.slotSize || acc.Slots > q.slots || acc.Size < 0 {
		return res, fmt.Errorf("server offered %d slots of %d bytes for %d bytes (asked for %d of %d)",
			acc.Slots, acc.SlotSize, acc.Size, q.slots, q.slotSize)
	}
	q.slotSize, q.slots = acc.SlotSize, acc.Slots
	if err := dst.begin(sp, acc); err != nil {
		return res, err
	}
	if err := q.connect(acc, o.Connect); err != nil {
		return res, err
	}
	size := acc.Size
	res = Result{Name: name, Size: size, Link: dev.LinkName(), Peer: acc.Link, Op: "RDMA READ",
		PathMTU: min(dev.PathMTU().Bytes(), acc.PathMTU), Reliability: q.rel.String(), SRWindow: q.srWin, CC: q.cc.String()}
	start := time.Now()

	h := sha256.New()
	var done int64
	wcs := make([]roce.WC, 1)
	type pending struct {
		slot int
		off  int64
		n    int
	}
	var inflight []pending
	// complete takes the oldest read's completion, appends the slot to the
	// file and frees it.
	complete := func() error {
		wc, err := q.wait(ctx, wcs)
		if err != nil {
			return ctxErr(ctx, fmt.Errorf("read from peer: %w", err))
		}
		p := inflight[0]
		inflight = inflight[1:]
		if wc.ID != uint64(p.slot) {
			return fmt.Errorf("completion for slot %d, want %d", wc.ID, p.slot)
		}
		if err := appendSlot(dst, h, q.slot(p.slot)[:p.n], p.off); err != nil {
			return err
		}
		done += int64(p.n)
		if err := c.send(&message{Type: msgFree, Slot: p.slot}); err != nil {
			return ctxErr(ctx, err)
		}
		if o.Progress != nil {
			o.Progress(done, size)
		}
		return nil
	}
	var next int64 // the offset the next data message must have
	for {
		var m message
		if err := c.recv(&m); err != nil {
			return res, ctxErr(ctx, err)
		}
		if m.Type == msgError {
			return res, remoteError(&m)
		}
		if m.Type == msgEnd {
			for len(inflight) > 0 {
				if err := complete(); err != nil {
					return res, err
				}
			}
			return res, acceptGet(c, dst, &m, h, done, size, start, &res)
		}
		if m.Type != msgData {
			return res, fmt.Errorf("control connection: unexpected %q during the transfer", m.Type)
		}
		if m.Slot < 0 || m.Slot >= q.slots || m.Len <= 0 || m.Len > q.slotSize || m.Off != next || next+int64(m.Len) > size {
			return res, fmt.Errorf("control connection: bad data message (slot %d, %d bytes at %d)", m.Slot, m.Len, m.Off)
		}
		for _, p := range inflight {
			if p.slot == m.Slot {
				return res, fmt.Errorf("control connection: slot %d reused before it was freed", m.Slot)
			}
		}
		if err := q.qp.PostSend(roce.SendWR{ID: uint64(m.Slot), Opcode: roce.WRRDMARead, Flags: roce.Signaled,
			SGL:        []roce.SGE{{Addr: q.slotAddr(m.Slot), Length: uint32(m.Len), LKey: q.mr.LKey()}},
			RemoteAddr: acc.Addr + uint64(m.Slot*q.slotSize), RKey: acc.RKey}); err != nil {
			return res, fmt.Errorf("post rdma read: %w", err)
		}
		inflight = append(inflight, pending{m.Slot, m.Off, m.Len})
		next += int64(m.Len)
		// Keep reads in flight while the server loads the next slots, but
		// never all of them: the server needs a free slot to go on.
		if len(inflight) >= q.slots || next == size {
			if err := complete(); err != nil {
				return res, err
			}
		}
	}
}

// acceptGet answers the server's end message m once done bytes (hashed in
// h) are in: when the sizes and the SHA-256 agree it commits dst and tells
// the server ok; else it says why not.
func acceptGet(c *ctrl, dst contentDst, m *message, h hash.Hash, done, size int64, start time.Time, res *Result) error {
	if done != size || m.Size != size {
		return fmt.Errorf("server ended after %d of %d bytes", done, size)
	}
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	if m.SHA256 != res.SHA256 {
		c.send(&message{Type: msgError, Error: "checksum mismatch"})
		return fmt.Errorf("checksum mismatch: received sha256 %s, server sent %s", res.SHA256, m.SHA256)
	}
	if err := dst.commit(true); err != nil {
		return err
	}
	c.send(&message{Type: msgOK, SHA256: res.SHA256})
	res.finish(start)
	return nil
}

// appendSlot hashes b and writes it at off (a file's errors name it).
func appendSlot(w io.WriterAt, h hash.Hash, b []byte, off int64) error {
	h.Write(b)
	_, err := w.WriteAt(b, off)
	return err
}
