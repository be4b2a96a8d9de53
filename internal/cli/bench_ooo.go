package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/xfer"
	"github.com/xdproce/xdproce/roce"
)

// bench write --mode ooo (docs/ooo.md, cm/negotiate_ooo.go): after the two
// xdproce ends agreed on the OOO mode, the server exposes its buffer through
// contexts of an OOO queue pair, and the client WRITEs --size bytes into it
// --iters times, oooWindow at once (one context each), counting the
// delivered completions: the target's proof that every byte was placed. A
// WRITE with no delivered completion within its timeout is reissued with
// the next tid (the transport never retransmits); the retry helper of
// roce/ooo is the full version of this.

// oooWindow is the WRITEs in flight, one server context (and one client
// context, for the completion) each. 32 × 64 KiB overran a veth's AF_XDP
// receive ring now and then (one reissue in 5,000 WRITEs); 16 did not.
const oooWindow = 16

// oooReissues bounds the reissues of one WRITE before the run fails.
const oooReissues = 20

// oooSide is one end's OOO queue pair, CQ, buffer and contexts.
type oooSide struct {
	qp   *roce.QP
	cq   *roce.CQ
	mr   *roce.MR
	ctxs []roce.Ctx
	gid  netip.Addr
}

// oooSetup makes this side's OOO queue pair with window contexts and a
// buffer of size bytes: the client's filled with a pattern, the server's
// open to remote writes.
func (b *bench) oooSetup(local net.Addr, client bool, window int) (*oooSide, error) {
	s := &oooSide{gid: b.sgid}
	if !s.gid.IsValid() {
		s.gid = xfer.LocalGID(b.dev, local)
	}
	pd := b.dev.AllocPD()
	var err error
	if s.cq, err = b.dev.CreateCQ(4 * window); err != nil {
		return nil, err
	}
	buf := make([]byte, b.size)
	access := roce.LocalWrite | roce.RemoteWrite
	if client {
		for i := range buf {
			buf[i] = byte(i*7 + i>>8 + 1)
		}
		access = roce.LocalWrite
	}
	if s.mr, err = pd.RegMR(buf, access); err != nil {
		return nil, err
	}
	if s.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.OOO, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 2 * window, MaxRecvWR: 1}); err != nil {
		return nil, err
	}
	if s.ctxs, err = s.qp.AcquireContexts(window); err != nil {
		s.qp.Destroy()
		return nil, err
	}
	return s, nil
}

// peer is what the other end is told: the queue pair, GID, contexts and,
// on the server, the buffer.
func (s *oooSide) peer(client bool) cm.OOOPeer {
	p := cm.OOOPeer{QPN: s.qp.QPN(), GID: cm.GIDFromAddr(s.gid)}
	for _, c := range s.ctxs {
		p.Ctxs = append(p.Ctxs, uint32(c))
	}
	if !client {
		p.VA, p.RKey, p.Len = s.mr.Addr(), s.mr.RKey(), s.mr.Len()
	}
	return p
}

// connect connects the queue pair to the peer: the path MTU is the OOO
// default (room for the XRH) unless -m asked for less.
func (b *bench) oooConnect(s *oooSide, r cm.OOOPeer) error {
	opts := roce.DefaultConnectOptions()
	opts.SGID = s.gid
	if b.mtu < b.dev.PathMTU() {
		opts.PathMTU = b.mtu
	}
	return s.qp.Connect(0, roce.Endpoint{QPN: r.QPN, GID: netip.AddrFrom16(r.GID)}, &opts)
}

// oooRun runs the agreed OOO test on conn (the agreement's connection).
func (b *bench) oooRun(ctx context.Context, conn net.Conn, client bool) ([]benchResult, error) {
	defer conn.Close()
	ctx, cancel := withBudget(ctx, b.budgetBase, b.size, b.iters, 1)
	defer cancel()
	res, err := b.oooRunConn(ctx, conn, client)
	return res, budgetErr(ctx, err)
}

func (b *bench) oooRunConn(ctx context.Context, conn net.Conn, client bool) ([]benchResult, error) {
	window := min(b.iters, oooWindow)
	if port := b.dev.Props().SrcPort; client && b.paths > 1 && port != 0 {
		fmt.Fprintf(b.env.Stderr, "bench %s: --paths %d: %s sends every frame from UDP port %d: one path\n", b.name, b.paths, b.dev.LinkName(), port)
		b.paths = 1
	}
	s, err := b.oooSetup(conn.LocalAddr(), client, window)
	if err != nil {
		return nil, fmt.Errorf("ooo queue pair: %w", err)
	}
	defer s.qp.Destroy()
	remote, err := cm.ExchangeOOO(ctx, conn, client, s.peer(client), func(r cm.OOOPeer) error { return b.oooConnect(s, r) })
	if err != nil {
		return nil, err
	}
	_, attr := s.qp.Query()
	b.oooMTU = attr.PathMTU
	var r cm.OOOResult
	if client {
		if len(remote.Ctxs) < window || remote.Len < b.size {
			return nil, fmt.Errorf("cm: bench ooo: %w: the server offers %d contexts and %d bytes, the run needs %d and %d", cm.ErrProtocol, len(remote.Ctxs), remote.Len, window, b.size)
		}
		if r, err = b.oooWrites(ctx, s, remote, window); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(s.mr.Bytes())
		r.SHA256 = hex.EncodeToString(sum[:])
		r.Delivered = s.qp.Stats().OOO.CompletionsReceived
		_, landed, err := cm.FinishOOO(ctx, conn, true, r, nil)
		if err != nil {
			return nil, err
		}
		if landed.SHA256 != r.SHA256 {
			return nil, fmt.Errorf("the server's buffer (SHA-256 %.16s…) is not what was written (%.16s…)", landed.SHA256, r.SHA256)
		}
		if landed.Completions < uint64(r.Iters) || landed.Completions > uint64(r.Iters+r.Retries) {
			return nil, fmt.Errorf("the server sent %d completions for %d WRITEs delivered (%d reissued)", landed.Completions, r.Iters, r.Retries)
		}
	} else {
		r, _, err = cm.FinishOOO(ctx, conn, false, cm.OOOResult{}, func(cm.OOOResult) cm.OOOLanded {
			sum := sha256.Sum256(s.mr.Bytes())
			return cm.OOOLanded{Completions: s.qp.Stats().OOO.CompletionsSent, SHA256: hex.EncodeToString(sum[:])}
		})
		if err != nil {
			return nil, err
		}
		if r.Size != b.size || r.Iters != b.iters || r.Seconds <= 0 {
			return nil, fmt.Errorf("cm: bench ooo: %w: the client reports %d × %d B in %v s", cm.ErrProtocol, r.Iters, r.Size, r.Seconds)
		}
	}
	row := benchResult{Schema: 1, Test: b.name, Mode: cm.ModeOOO, Paths: r.Paths, Role: map[bool]string{true: "client", false: "server"}[client],
		Bytes: b.size, Iters: b.iters, QPs: 1, Seconds: r.Seconds, Retries: r.Retries, Link: b.dev.LinkName(), PathMTU: b.oooMTU.Bytes()}
	msgs := float64(r.Iters)
	row.BW = msgs * float64(b.size) * 8 / r.Seconds / 1e9
	row.Rate = msgs / r.Seconds / 1e6
	return []benchResult{row}, nil
}

// oooSlot is one WRITE in flight.
type oooSlot struct {
	busy   bool
	tid    uint32
	tries  int
	posted time.Time
}

// oooWrites posts the WRITEs, window at once, and waits for their delivered
// completions, reissuing one that has none within its timeout.
func (b *bench) oooWrites(ctx context.Context, s *oooSide, remote cm.OOOPeer, window int) (cm.OOOResult, error) {
	r := cm.OOOResult{Size: b.size, Paths: max(b.paths, 1)}
	// A WRITE waits for the window's bytes ahead of it at 10 MB/s, and 200 ms.
	timeout := 200*time.Millisecond + time.Duration(float64(window*b.size)/10e6*float64(time.Second))
	slots := make([]oooSlot, window)
	post := func(i int) error {
		sl := &slots[i]
		sl.tid++
		sl.busy, sl.posted = true, time.Now()
		err := s.qp.PostSend(roce.SendWR{ID: uint64(i), Opcode: roce.WROOOWrite,
			SGL:        []roce.SGE{{Addr: s.mr.Addr(), Length: uint32(b.size), LKey: s.mr.LKey()}},
			RemoteAddr: remote.VA, RKey: remote.RKey, Ctx: s.ctxs[i], RemoteCtx: roce.Ctx(remote.Ctxs[i]),
			TID: sl.tid, Notify: roce.NotifyInitiator, Tag: uint32(i), Paths: uint8(max(b.paths, 1))})
		if err != nil {
			return fmt.Errorf("post ooo write: %w", err)
		}
		return nil
	}
	wcs := make([]roce.WC, 4*window)
	issued := 0
	t0 := time.Now()
	for r.Iters < b.iters {
		for i := range slots {
			if !slots[i].busy && issued < b.iters {
				if err := post(i); err != nil {
					return r, err
				}
				issued++
			}
		}
		oldest := time.Now()
		for _, sl := range slots {
			if sl.busy && sl.posted.Before(oldest) {
				oldest = sl.posted
			}
		}
		wctx, cancel := context.WithDeadline(ctx, oldest.Add(timeout))
		n, err := s.cq.Wait(wctx, wcs)
		cancel()
		if err != nil && ctx.Err() != nil {
			return r, fmt.Errorf("after %d of %d delivered WRITEs: %w", r.Iters, b.iters, err)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return r, err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != roce.WCSuccess {
				return r, fmt.Errorf("ooo write %d (tid %d): %v", wc.ID, wc.TID, wc.Status)
			}
			if wc.Opcode != roce.WCOOODelivered || wc.ID >= uint64(window) {
				continue
			}
			if sl := &slots[wc.ID]; sl.busy && wc.TID == sl.tid {
				sl.busy, sl.tries = false, 0
				r.Iters++
			}
		}
		now := time.Now()
		for i := range slots {
			sl := &slots[i]
			if !sl.busy || now.Sub(sl.posted) < timeout {
				continue
			}
			if sl.tries++; sl.tries > oooReissues {
				return r, fmt.Errorf("ooo write on context %d: no delivered completion after %d reissues of %v each", i, oooReissues, timeout)
			}
			r.Retries++
			if err := post(i); err != nil {
				return r, err
			}
		}
	}
	r.Seconds = time.Since(t0).Seconds()
	return r, nil
}
