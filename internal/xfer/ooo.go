package xfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/ooo"
)

// OOO mode (docs/ooo.md): put_ooo and get_ooo are put and get with an OOO
// queue pair on each side instead of RC. The server's accept carries, besides
// its queue pair and staging buffer, the ids and keys of oooContexts
// contexts its queue pair holds for the client; the client's roce/ooo Writer
// moves each slot with OOO WRITEs (put) or OOO READs (get) addressed to them,
// retrying what is not delivered, and the slot protocol around it (data,
// free, end with the SHA-256, ok) is the RC one. The server is passive: its
// engine places the WRITEs and serves the READs. The client asks for it only
// when the server's hello announced cm.CapOOO.
const (
	msgPutOOO = "put_ooo" // client → server: store NAME written by OOO WRITEs
	msgGetOOO = "get_ooo" // client → server: send NAME by OOO READs

	// OpOOOWrite and OpOOORead are Result.Op in OOO mode.
	OpOOOWrite = "OOO WRITE"
	OpOOORead  = "OOO READ"
)

// oooContexts is how many contexts a server offers a client in OOO mode:
// the client's operations in flight. Under loss operations shrink (at 5 %
// to 4 packets: roce/ooo's sizing rule) and each timeout holds one context
// for a round-trip timeout, so there are enough for the Writer's window of
// 1024 packets to stay full with small operations.
const oooContexts = 128

// OOOResult is what a transfer in OOO mode adds to its Result: on the
// client the Writer's counters (ooo.Stats), on both sides its queue pair's
// OOO counters (roce.OOOStats).
type OOOResult struct {
	Paths            int     `json:"paths,omitempty"`
	Attempts         uint64  `json:"attempts"`
	Delivered        uint64  `json:"delivered"`
	Retries          uint64  `json:"retries"`
	StaleCompletions uint64  `json:"stale_completions"`
	LossEstimate     float64 `json:"loss_estimate"`
	OpPackets        int     `json:"op_packets,omitempty"`
	// A put's conditional commit (ooo_commit.go): used, its commits posted
	// (one per round), those flushed because an operation of their round
	// failed, and those reissued because their delivered completion was late.
	Commit        bool   `json:"commit,omitempty"`
	CommitsPosted uint64 `json:"commits_posted,omitempty"`
	CommitFlushes uint64 `json:"commit_flushes,omitempty"`
	CommitRetries uint64 `json:"commit_retries,omitempty"`
	Late          uint64 `json:"late_completions"` // stale completions of the attempt just before: timeouts too short
	RTTMicros     int64  `json:"rtt_us"`           // the smoothed round trip of delivered operations
	RTTDevMicros  int64  `json:"rtt_dev_us"`
	// This side's queue pair (the transport's drops).
	StaleCtx  uint64 `json:"stale_ctx"`
	StaleTID  uint64 `json:"stale_tid"`
	DupIndex  uint64 `json:"dup_index"`
	CplSent   uint64 `json:"ooo_completions_sent"`
	CplRecvd  uint64 `json:"ooo_completions_received"`
	ProtError uint64 `json:"ooo_protection_errors"`
}

func opName(typ roce.QPType, read bool) string {
	switch {
	case typ == roce.OOO && read:
		return OpOOORead
	case typ == roce.OOO:
		return OpOOOWrite
	case read:
		return "RDMA READ"
	}
	return "RDMA WRITE"
}

// offerContexts, for an OOO queue pair, acquires the contexts the client's
// operations will address and puts them in acc; res gets an OOOResult.
func (q *qpConn) offerContexts(acc *message, res *Result) error {
	if q.qp.Type() != roce.OOO {
		return nil
	}
	ctxs, err := q.qp.AcquireContexts(oooContexts)
	if err != nil {
		return err
	}
	for _, c := range ctxs {
		acc.Ctxs = append(acc.Ctxs, uint32(c))
	}
	res.OOO = &OOOResult{}
	return nil
}

// oooCounters copies the queue pair's OOO counters into res (when it has an
// OOOResult).
func (q *qpConn) oooCounters(res *Result) {
	if res.OOO == nil || q.qp == nil {
		return
	}
	s := q.qp.Stats().OOO
	r := res.OOO
	r.StaleCtx, r.StaleTID, r.DupIndex = s.StaleCtx, s.StaleTID, s.DupIndex
	r.CplSent, r.CplRecvd, r.ProtError = s.CompletionsSent, s.CompletionsReceived, s.ProtectionErrors
}

// errNoOOO: the server's hello did not announce OOO mode.
var errNoOOO = fmt.Errorf("the server does not offer OOO mode (capability %q): an xdproce from before it; upgrade it, or leave out --mode ooo", cm.CapOOO)

// startOOO is the client's side of put_ooo and get_ooo up to the Writer:
// its OOO queue pair and staging buffer, the request, the server's accept,
// the connection. The caller closes q and w.
func startOOO(c *ctrl, dev *roce.Device, req *message, slotSize, slots int, access roce.Access, o *Options) (*qpConn, *ooo.Writer, *message, error) {
	if o.Enlarge != nil {
		return nil, nil, nil, errors.New("OOO mode and an enlargement channel exclude each other")
	}
	if !c.c.PeerHas(cm.CapOOO) {
		return nil, nil, nil, errNoOOO
	}
	q, err := newQPConn(dev, roce.OOO, slotSize, slots, access, c.c.LocalAddr())
	if err != nil {
		return nil, nil, nil, err
	}
	req.Version, req.SlotSize, req.Slots = ProtocolVersion, q.slotSize, q.slots
	q.endpoint(req)
	fail := func(err error) (*qpConn, *ooo.Writer, *message, error) {
		q.close()
		return nil, nil, nil, err
	}
	if err := c.send(req); err != nil {
		return fail(err)
	}
	acc := new(message)
	if err := c.expect(acc, msgAccept); err != nil {
		return fail(ctxErr(c.ctx, err))
	}
	if acc.SlotSize <= 0 || acc.Slots <= 0 || acc.SlotSize > q.slotSize || acc.Slots > q.slots || acc.Size < 0 ||
		len(acc.Ctxs) == 0 || len(acc.Ctxs) > 4*oooContexts {
		return fail(fmt.Errorf("server offered %d slots of %d bytes and %d contexts (asked for %d of %d)",
			acc.Slots, acc.SlotSize, len(acc.Ctxs), q.slots, q.slotSize))
	}
	q.slotSize, q.slots = acc.SlotSize, acc.Slots
	if err := q.connect(acc, o.Connect); err != nil {
		return fail(err)
	}
	t := ooo.Target{VA: acc.Addr, RKey: acc.RKey}
	for _, c := range acc.Ctxs {
		t.Ctxs = append(t.Ctxs, roce.Ctx(c))
	}
	w, err := ooo.NewWriter(*o.OOO, ooo.Lane{QP: q.qp, CQ: q.cq, Remote: t,
		Local: ooo.Region{Addr: q.mr.Addr(), LKey: q.mr.LKey(), RKey: q.mr.RKey()}})
	if err != nil {
		return fail(err)
	}
	return q, w, acc, nil
}

// writerCounters puts the Writer's counters and the queue pair's into res.
func writerCounters(res *Result, w *ooo.Writer, q *qpConn, paths uint8) {
	st := w.Stats()
	res.OOO = &OOOResult{Paths: int(max(paths, 1)), Attempts: st.Attempts, Delivered: st.Delivered, Retries: st.Retries,
		StaleCompletions: st.StaleCompletions, LossEstimate: st.Loss, OpPackets: st.OpPackets, Late: st.Late,
		RTTMicros: st.RTT.Microseconds(), RTTDevMicros: st.RTTDev.Microseconds(),
		Commit: res.OOO != nil && res.OOO.Commit, CommitsPosted: st.CommitsPosted, CommitFlushes: st.CommitFlushes, CommitRetries: st.CommitRetries}
	q.oooCounters(res)
}

// sendOOO is Send in OOO mode: each slot goes by the Writer's OOO WRITEs
// into the same slot of the server's staging buffer, then a data message.
// The slots go through one ooo.Stream, so the operations of several slots
// are in flight together (a retried operation at the end of one slot does
// not hold up the next); the stream reports them delivered in the order
// they were added, which is the file's. The end is the conditional commit
// (ooo_commit.go) when the server offers a commit context, else the end
// message.
func sendOOO(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, dev *roce.Device, r io.Reader, size int64, name string, o *Options) (res Result, err error) {
	slotSize, slots := stagingSize(size, o.SlotSize, o.Slots)
	req := &message{Type: msgPutOOO, Name: name, Size: size, Force: o.Force}
	q, w, acc, err := startOOO(c, dev, req, slotSize, slots, roce.LocalWrite, o)
	if err != nil {
		return res, err
	}
	defer q.close()
	defer w.Close()
	res = Result{Name: name, Size: size, Link: dev.LinkName(), Peer: acc.Link, Op: OpOOOWrite,
		PathMTU: min(q.pmtu.Bytes(), acc.PathMTU)}
	defer writerCounters(&res, w, q, o.OOO.Paths)
	start := time.Now()
	free, final := watchFree(c, cancel, q.slots)
	h := sha256.New()
	var sent int64 // bytes delivered and announced, in file order
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	commit := acc.CommitCtx != 0
	res.OOO = &OOOResult{Commit: commit}
	if !commit {
		o.Log.Warn("the server offers no commit context (an xdproce from before the conditional commit): the transfer ends by an end message on the control connection")
	}
	st, err := q.startStream(sctx, w, acc, func(local, _ uint64, n int) error {
		if err := c.send(&message{Type: msgData, Slot: int(local) / q.slotSize, Off: sent, Len: n}); err != nil {
			return err
		}
		sent += int64(n)
		if o.Progress != nil {
			o.Progress(sent, size)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	defer func() {
		stop()
		st.Close()
	}()
	for off := int64(0); off < size; {
		var s int
		select {
		case s = <-free:
		case <-st.Done():
			return res, ctxErr(ctx, fmt.Errorf("write to peer: %w", st.Close()))
		case <-ctx.Done():
			return res, ctxErr(ctx, nil)
		}
		n := int(min(int64(q.slotSize), size-off))
		buf := q.slot(s)[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return res, fmt.Errorf("read %s at %d: %w", name, off, err)
		}
		h.Write(buf)
		at := uint64(s * q.slotSize)
		if err := st.Add(at, at, n); err != nil {
			return res, ctxErr(ctx, fmt.Errorf("write to peer: %w", err))
		}
		off += int64(n)
	}
	if commit {
		if err := checkEOF(c, r, name); err != nil {
			return res, err
		}
		if res.SHA256, err = q.sendCommit(ctx, st, stop, size, h.Sum(nil), final); err != nil {
			return res, err
		}
		res.finish(start)
		return res, nil
	}
	if err := st.Close(); err != nil {
		return res, ctxErr(ctx, fmt.Errorf("write to peer: %w", err))
	}
	if res.SHA256, err = endPut(ctx, c, r, h, size, name, nil, final); err != nil {
		return res, err
	}
	res.finish(start)
	return res, nil
}

// getOOO is Get in OOO mode: for each data message the Writer reads the
// slot by OOO READs into the same slot here, which is then appended and
// freed.
func getOOO(ctx context.Context, c *ctrl, dev *roce.Device, name string, tmp *tempFile, o *Options) (res Result, err error) {
	req := &message{Type: msgGetOOO, Name: name}
	q, w, acc, err := startOOO(c, dev, req, o.SlotSize, o.Slots, roce.LocalWrite|roce.RemoteWrite, o)
	if err != nil {
		return res, err
	}
	defer q.close()
	defer w.Close()
	size := acc.Size
	res = Result{Name: name, Size: size, Link: dev.LinkName(), Peer: acc.Link, Op: OpOOORead,
		PathMTU: min(q.pmtu.Bytes(), acc.PathMTU)}
	defer writerCounters(&res, w, q, o.OOO.Paths)
	start := time.Now()
	h := sha256.New()
	var next int64
	for {
		var m message
		if err := c.recv(&m); err != nil {
			return res, ctxErr(ctx, err)
		}
		switch m.Type {
		case msgError:
			return res, &RemoteError{Msg: m.Error}
		case msgData:
		case msgEnd:
			if next != size || m.Size != size {
				return res, fmt.Errorf("server ended after %d of %d bytes", next, size)
			}
			res.SHA256 = hex.EncodeToString(h.Sum(nil))
			if m.SHA256 != res.SHA256 {
				c.send(&message{Type: msgError, Error: "checksum mismatch"})
				return res, fmt.Errorf("checksum mismatch: received sha256 %s, server sent %s", res.SHA256, m.SHA256)
			}
			if err := tmp.commit(true); err != nil {
				return res, err
			}
			c.send(&message{Type: msgOK, SHA256: res.SHA256})
			res.finish(start)
			return res, nil
		default:
			return res, fmt.Errorf("control connection: unexpected %q during the transfer", m.Type)
		}
		if m.Slot < 0 || m.Slot >= q.slots || m.Len <= 0 || m.Len > q.slotSize || m.Off != next || next+int64(m.Len) > size {
			return res, fmt.Errorf("control connection: bad data message (slot %d, %d bytes at %d)", m.Slot, m.Len, m.Off)
		}
		at := uint64(m.Slot * q.slotSize)
		if err := w.Read(ctx, at, at, m.Len, roce.NotifyInitiator); err != nil {
			return res, ctxErr(ctx, fmt.Errorf("read from peer: %w", err))
		}
		if err := appendSlot(tmp.File, h, q.slot(m.Slot)[:m.Len], m.Off); err != nil {
			return res, err
		}
		next += int64(m.Len)
		if err := c.send(&message{Type: msgFree, Slot: m.Slot}); err != nil {
			return res, ctxErr(ctx, err)
		}
		if o.Progress != nil {
			o.Progress(next, size)
		}
	}
}
