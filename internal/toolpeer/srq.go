package toolpeer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// SRQPeer is xdproce's end of an ibv_srq_pingpong run over a connection already made: RC queue
// pairs in RESET created on one shared receive queue, the CQ they all send and receive on, and
// a registered buffer of at least size bytes (the tool sends from and receives into the same
// bytes).
type SRQPeer struct {
	QPs []*roce.QP
	SRQ *roce.SRQ
	CQ  *roce.CQ
	MR  *roce.MR
	GID cm.GID
	// RxDepth is the receives kept posted on the SRQ (the tool's -r; 0: 500). The tool
	// reposts up to it whenever no more than len(QPs) remain.
	RxDepth int
	Connect *roce.ConnectOptions // nil: roce.DefaultConnectOptions
}

// SRQPingpongResult is what an SRQ pingpong run did, printable as ibv_srq_pingpong prints it.
type SRQPingpongResult struct {
	Local, Remote []cm.PingpongDest
	Size, Iters   int
	Elapsed       time.Duration
}

// Lines are ibv_srq_pingpong's output lines: a local address line per queue pair, a remote
// address line per queue pair, then bytes and iterations with their rates.
func (r SRQPingpongResult) Lines() []string {
	var l []string
	for _, d := range r.Local {
		l = append(l, "  local address:  "+d.String())
	}
	for _, d := range r.Remote {
		l = append(l, "  remote address: "+d.String())
	}
	return append(l, rateLines(r.Size, r.Iters, r.Elapsed)...)
}

// Pingpong runs ibv_srq_pingpong's exchange and loop: the client posts a SEND on every queue
// pair first; on each queue pair, a side sends its next message once its previous send and a
// receive there completed, until iters sends and iters receives completed in all (iters
// counts across the queue pairs, as the tool's loop does).
func (p *SRQPeer) Pingpong(ctx context.Context, conn net.Conn, client bool, size, iters int) (SRQPingpongResult, error) {
	res := SRQPingpongResult{Size: size, Iters: iters}
	n := len(p.QPs)
	rx := p.RxDepth
	if rx == 0 {
		rx = 500
	}
	switch {
	case size <= 0 || iters <= 0:
		return res, fmt.Errorf("toolpeer: srq pingpong: size %d and iterations %d must be positive", size, iters)
	case n == 0 || n > cm.SRQPingpongMsgs || p.SRQ == nil || p.CQ == nil || p.MR == nil:
		return res, fmt.Errorf("toolpeer: srq pingpong needs 1 to %d queue pairs, an SRQ, a CQ and an MR", cm.SRQPingpongMsgs)
	case rx < n:
		return res, fmt.Errorf("toolpeer: srq pingpong: rx depth %d is too small for %d queue pairs", rx, n)
	case p.MR.Len() < size:
		return res, fmt.Errorf("toolpeer: srq pingpong: buffer of %d bytes, the run needs %d", p.MR.Len(), size)
	}
	sge := []roce.SGE{{Addr: p.MR.Addr(), Length: uint32(size), LKey: p.MR.LKey()}}
	post := func(k int) (int, error) {
		for i := range k {
			if err := p.SRQ.PostRecv(roce.RecvWR{ID: toolRecvID, SGL: sge}); err != nil {
				return i, fmt.Errorf("toolpeer: srq pingpong: post receive: %w", err)
			}
		}
		return k, nil
	}
	routs, err := post(rx)
	if err != nil {
		return res, err
	}
	idx := make(map[uint32]int, n)
	for i, q := range p.QPs {
		idx[q.QPN()] = i
		res.Local = append(res.Local, cm.PingpongDest{QPN: q.QPN(), PSN: rand.Uint32() & 0xffffff, GID: p.GID})
	}
	connect := func(remotes []cm.PingpongDest) error {
		for i, q := range p.QPs {
			r := remotes[i]
			if err := q.Connect(res.Local[i].PSN, roce.Endpoint{QPN: r.QPN, PSN: r.PSN, GID: netip.AddrFrom16(r.GID)}, p.Connect); err != nil {
				return fmt.Errorf("queue pair %d: %w", i, err)
			}
		}
		return nil
	}
	if client {
		if res.Remote, err = cm.DialSRQPingpong(ctx, conn, res.Local); err != nil {
			return res, err
		}
		if err := connect(res.Remote); err != nil {
			return res, fmt.Errorf("toolpeer: srq pingpong: %w", err)
		}
	} else if res.Remote, err = cm.ServeSRQPingpong(ctx, conn, res.Local, connect); err != nil {
		return res, err
	}

	send := func(i int) error {
		if err := p.QPs[i].PostSend(roce.SendWR{ID: toolSendID, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: sge}); err != nil {
			return fmt.Errorf("toolpeer: srq pingpong: post send: %w", err)
		}
		return nil
	}
	pending := make([]int, n)
	for i := range pending {
		pending[i] = toolRecvID
		if client {
			if err := send(i); err != nil {
				return res, err
			}
			pending[i] |= toolSendID
		}
	}
	scnt, rcnt := 0, 0
	t0 := time.Now()
	wcs := make([]roce.WC, n+rx)
	for rcnt < iters || scnt < iters {
		k, err := p.CQ.Wait(ctx, wcs)
		if err != nil {
			return res, fmt.Errorf("toolpeer: srq pingpong after %d sends and %d receives: wait for completions: %w", scnt, rcnt, err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != roce.WCSuccess {
				return res, fmt.Errorf("toolpeer: srq pingpong: work request %d (%v): %v", wc.ID, wc.Opcode, wc.Status)
			}
			i, ok := idx[wc.QPN]
			if !ok {
				return res, fmt.Errorf("toolpeer: srq pingpong: completion for QPN %06x, not one of ours", wc.QPN)
			}
			switch wc.ID {
			case toolSendID:
				scnt++
			case toolRecvID:
				if int(wc.ByteLen) != size {
					return res, fmt.Errorf("toolpeer: srq pingpong: received %d bytes, want %d", wc.ByteLen, size)
				}
				if routs--; routs <= n {
					m, err := post(rx - routs)
					routs += m
					if err != nil {
						return res, err
					}
				}
				rcnt++
			}
			pending[i] &^= int(wc.ID)
			if scnt < iters && pending[i] == 0 {
				if err := send(i); err != nil {
					return res, err
				}
				pending[i] = toolRecvID | toolSendID
			}
		}
	}
	res.Elapsed = time.Since(t0)
	return res, nil
}
