package xfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// Result describes a finished transfer.
type Result struct {
	Name    string        `json:"name"`
	Size    int64         `json:"size"`
	SHA256  string        `json:"sha256"`
	Elapsed time.Duration `json:"-"`
	Seconds float64       `json:"seconds"`
	Gbps    float64       `json:"gbps"`
	Link    string        `json:"link"`      // this side's link
	Peer    string        `json:"peer_link"` // the peer's link
	PathMTU int           `json:"path_mtu"`
	Op      string        `json:"op"` // OpLMRM, "RDMA WRITE", "RDMA READ", OpEnlarge, OpOOOWrite or OpOOORead
	// Enlarge is set for a transfer through an enlargement channel.
	Enlarge *EnlargeResult `json:"enlarge,omitempty"`
	// OOO is set for a transfer in OOO mode (ooo.go).
	OOO *OOOResult `json:"ooo,omitempty"`
	// Reliability is the RC queue pair's loss recovery, as agreed with the
	// server: "gbn" or "sr" (docs/sr-wire.md); empty for the other modes.
	Reliability string `json:"reliability,omitempty"`
	// SRWindow is, with "sr", the most PSNs this side's send window may
	// have in flight: what the server holds past a hole.
	SRWindow int `json:"sr_window,omitempty"`
	// CC is the RC queue pair's congestion control, as agreed with the
	// server: "none" or "dcqcn" (docs/cc.md); empty for the other modes.
	CC string `json:"cc,omitempty"`
}

// OpEnlarge is Result.Op of a transfer through an enlargement channel.
const OpEnlarge = "enlarge channel (RDMA WRITE with immediate)"

func (r *Result) finish(start time.Time) {
	r.Elapsed = time.Since(start)
	r.Seconds = r.Elapsed.Seconds()
	if r.Seconds > 0 {
		r.Gbps = float64(r.Size) * 8 / r.Seconds / 1e9
	}
}

// ValidName reports whether name may name a file on the server: a plain
// file name, no directories, not "." or "..", not hidden, valid UTF-8
// without control characters.
func ValidName(name string) error {
	switch {
	case name == "":
		return errors.New("empty file name")
	case len(name) > 255:
		return errors.New("file name longer than 255 bytes")
	case name != filepath.Base(name) || filepath.IsAbs(name) || name == "." || name == "..":
		return fmt.Errorf("file name %q: want a plain name without directories", name)
	case name[0] == '.':
		return fmt.Errorf("file name %q: hidden names are refused", name)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("file name %q: not UTF-8", name)
	}
	for _, c := range name {
		if c == '/' || c == '\\' {
			return fmt.Errorf("file name %q: want a plain name without directories", name)
		}
		if unicode.IsControl(c) {
			return fmt.Errorf("file name %q: control characters are refused", name)
		}
	}
	return nil
}

// Send stores size bytes read from r on the server at the other end of conn
// under name, written from dev into the server's lmrm pool (by RDMA WRITE
// into its staging buffer when the server is from before lmrm; through an
// enlargement channel when opts.Enlarge is set). It returns when the server has verified
// the SHA-256 and renamed the file into place. conn is closed on return.
func Send(ctx context.Context, dev *roce.Device, conn *cm.Conn, r io.Reader, size int64, name string, opts *Options) (res Result, err error) {
	o := opts.withDefaults()
	if err := ValidName(name); err != nil {
		conn.Close()
		return res, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c := newCtrl(ctx, conn)
	defer c.close()
	if o.OOO != nil {
		return sendOOO(ctx, cancel, c, dev, r, size, name, &o)
	}
	if o.Enlarge != nil {
		return sendEnlarge(ctx, cancel, c, dev, r, size, name, &o)
	}
	if conn.PeerHas(cm.CapLMRM) {
		return sendLMRM(ctx, cancel, c, dev, r, size, name, &o)
	}
	slotNotice(&o)

	slotSize, slots := stagingSize(size, o.SlotSize, o.Slots)
	q, err := newQPConn(dev, roce.RC, slotSize, slots, roce.LocalWrite, conn.LocalAddr())
	if err != nil {
		return res, err
	}
	defer q.close()
	req := &message{Type: msgPut, Version: ProtocolVersion, Name: name, Size: size, Force: o.Force, SlotSize: slotSize, Slots: slots}
	q.offer(o.Connect)
	acc, err := q.ask(c, req)
	if err != nil {
		return res, err
	}
	if acc.SlotSize <= 0 || acc.Slots <= 0 || acc.SlotSize > slotSize || acc.Slots > slots {
		return res, fmt.Errorf("server offered %d slots of %d bytes (asked for %d of %d)", acc.Slots, acc.SlotSize, slots, slotSize)
	}
	q.slotSize, q.slots = acc.SlotSize, acc.Slots
	if err := q.connect(acc, o.Connect); err != nil {
		return res, err
	}
	res = Result{Name: name, Size: size, Link: dev.LinkName(), Peer: acc.Link, Op: "RDMA WRITE",
		PathMTU: min(dev.PathMTU().Bytes(), acc.PathMTU), Reliability: q.rel.String(), SRWindow: q.srWin, CC: q.cc.String()}
	start := time.Now()

	free, final := watchFree(c, cancel, q.slots)

	h := sha256.New()
	type pending struct {
		slot int
		off  int64
		n    int
	}
	inflight := make([]pending, 0, q.slots)
	wcs := make([]roce.WC, 1)
	// complete takes the oldest write's completion (waiting for it when
	// block) and tells the server about it; false when none was ready.
	complete := func(block bool) (bool, error) {
		var wc roce.WC
		if block {
			var err error
			if wc, err = q.wait(ctx, wcs); err != nil {
				return false, ctxErr(ctx, fmt.Errorf("write to peer: %w", err))
			}
		} else {
			n, err := q.cq.Poll(wcs[:1])
			if err != nil {
				return false, fmt.Errorf("completion queue: %w", err)
			}
			if n == 0 {
				return false, nil
			}
			if wc = wcs[0]; wc.Status != roce.WCSuccess {
				return false, ctxErr(ctx, fmt.Errorf("write to peer: rdma %v failed: %v", wc.Opcode, wc.Status))
			}
		}
		p := inflight[0]
		if wc.ID != uint64(p.slot) {
			return false, fmt.Errorf("completion for slot %d, want %d", wc.ID, p.slot)
		}
		inflight = inflight[1:]
		if err := c.send(&message{Type: msgData, Slot: p.slot, Off: p.off, Len: p.n}); err != nil {
			return false, ctxErr(ctx, err)
		}
		if o.Progress != nil {
			o.Progress(p.off+int64(p.n), size)
		}
		return true, nil
	}
	var off int64
	for off < size {
		for len(inflight) > 0 {
			if ok, err := complete(false); err != nil {
				return res, err
			} else if !ok {
				break
			}
		}
		s := -1
		for s < 0 {
			select {
			case s = <-free:
				continue
			default:
			}
			if len(inflight) > 0 {
				if _, err := complete(true); err != nil {
					return res, err
				}
				continue
			}
			select {
			case s = <-free:
			case <-ctx.Done():
				return res, ctxErr(ctx, nil)
			}
		}
		n := int(min(int64(q.slotSize), size-off))
		buf := q.slot(s)[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return res, fmt.Errorf("read %s at %d: %w", name, off, err)
		}
		h.Write(buf)
		if err := q.qp.PostSend(roce.SendWR{ID: uint64(s), Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
			SGL:        []roce.SGE{{Addr: q.slotAddr(s), Length: uint32(n), LKey: q.mr.LKey()}},
			RemoteAddr: acc.Addr + uint64(s*q.slotSize), RKey: acc.RKey}); err != nil {
			return res, fmt.Errorf("post rdma write: %w", err)
		}
		inflight = append(inflight, pending{s, off, n})
		off += int64(n)
	}
	for len(inflight) > 0 {
		if _, err := complete(true); err != nil {
			return res, err
		}
	}
	if res.SHA256, err = endPut(ctx, c, r, h, size, name, nil, final); err != nil {
		return res, err
	}
	res.finish(start)
	return res, nil
}

// endPut ends a put once the content (hashed in h) is sent: it checks that
// r has no more bytes, sends the end message with the SHA-256, then (with
// drain) waits for the writes still on their way, then for the server's
// verdict. A server that has every byte says ok even when a write's
// acknowledgement went missing after that; without the verdict a failed
// write is the reason. It returns the SHA-256.
func endPut(ctx context.Context, c *ctrl, r io.Reader, h hash.Hash, size int64, name string, drain func() error, final <-chan message) (string, error) {
	if err := checkEOF(c, r, name); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := c.send(&message{Type: msgEnd, Size: size, SHA256: sum}); err != nil {
		return sum, ctxErr(ctx, err)
	}
	var failed error
	if drain != nil {
		failed = drain()
	}
	sum, err := putVerdict(ctx, sum, final)
	var re *RemoteError
	if err != nil && failed != nil && !errors.As(err, &re) {
		err = fmt.Errorf("write to peer: %w", failed)
	}
	return sum, err
}

// checkEOF fails (telling the server) when r has more bytes: a file that
// grew while being read is not what was announced.
func checkEOF(c *ctrl, r io.Reader, name string) error {
	var extra [1]byte
	if n, _ := r.Read(extra[:]); n > 0 {
		c.send(&message{Type: msgError, Error: "the file grew while being sent"})
		return fmt.Errorf("read %s: the file grew while being sent", name)
	}
	return nil
}

// putVerdict waits for the server's answer to a put's end (or commit)
// and checks its SHA-256 against sum.
func putVerdict(ctx context.Context, sum string, final <-chan message) (string, error) {
	select {
	case m := <-final:
		if m.Type == msgError {
			return sum, remoteError(&m)
		}
		if m.SHA256 != sum {
			return sum, fmt.Errorf("checksum mismatch: sent sha256 %s, server has %s", sum, m.SHA256)
		}
	case <-ctx.Done():
		return sum, ctxErr(ctx, nil)
	}
	return sum, nil
}

// watchFree reads what the peer sends while this side fills slots (the
// client's put, the server's get): the slots it frees (on free, which
// starts with every slot) and its verdict (on final); an error message, a
// bad or unexpected message or the connection's end cancels ctx with the
// reason.
func watchFree(c *ctrl, cancel context.CancelCauseFunc, slots int) (free chan int, final chan message) {
	free = make(chan int, slots)
	final = make(chan message, 1)
	for i := range slots {
		free <- i
	}
	go func() {
		for {
			var m message
			if err := c.recv(&m); err != nil {
				cancel(err)
				return
			}
			switch m.Type {
			case msgFree:
				if m.Slot < 0 || m.Slot >= slots {
					cancel(fmt.Errorf("control connection: free of slot %d (of %d)", m.Slot, slots))
					return
				}
				free <- m.Slot
			case msgOK, msgError:
				if m.Type == msgError {
					// The server's reason ends the transfer at once, and
					// wins over what its going away does to the writes.
					cancel(remoteError(&m))
				}
				final <- m
				return
			default:
				cancel(fmt.Errorf("control connection: unexpected %q during the transfer", m.Type))
				return
			}
		}
	}()
	return free, final
}

// stagingSize picks the slot size and count for size bytes: no more than
// needed, at least one 4 KiB slot.
func stagingSize(size int64, slotSize, slots int) (int, int) {
	if size < int64(slotSize) {
		slotSize = int(max((size+4095)&^4095, 4096))
		slots = 1
	} else if n := (size + int64(slotSize) - 1) / int64(slotSize); n < int64(slots) {
		slots = int(n)
	}
	return slotSize, slots
}

// ctxErr prefers the cause of the context's cancellation (the control
// connection's failure, the peer's error) over err.
func ctxErr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		var re *RemoteError
		if errors.As(cause, &re) {
			return cause
		}
		if errors.Is(cause, errPeerClosed) {
			return fmt.Errorf("transfer interrupted: %w", cause)
		}
		if err == nil || errors.Is(err, context.Canceled) || isDeadline(err) || errors.Is(err, errPeerClosed) {
			return cause
		}
	}
	if err == nil {
		return ctx.Err()
	}
	return err
}

func isDeadline(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}
