package mcast

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// transport is the sender's RDMA side: the file registered, the multicast
// queue pair (DestQPN MulticastQPN, the group's address and MAC) and one
// queue pair per member, whose send CQ (shared) receives the members'
// acknowledgements.
type transport struct {
	pd     *roce.PD
	mr     *roce.MR
	data   []byte
	mq     *roce.QP
	mqCQ   *roce.CQ
	ackCQ  *roce.CQ
	rcq    *roce.CQ
	qps    []*roce.QP
	maxWR  int
	chunk  int
	closed bool
}

func newTransport(cfg Config, data []byte) (*transport, error) {
	d := cfg.Dev
	t := &transport{pd: d.AllocPD(), data: data, maxWR: 2*cfg.Ctxs + 2, chunk: cfg.Chunk}
	reg := data
	if len(reg) == 0 {
		reg = make([]byte, 1)
	}
	var err error
	if t.mr, err = t.pd.RegMR(reg, roce.LocalWrite); err != nil {
		return nil, fmt.Errorf("mcast: register the file: %w", err)
	}
	if t.mqCQ, err = d.CreateCQ(4 * t.maxWR); err != nil {
		t.close()
		return nil, fmt.Errorf("mcast: %w", err)
	}
	if t.ackCQ, err = d.CreateCQ(4096); err != nil {
		t.close()
		return nil, fmt.Errorf("mcast: %w", err)
	}
	if t.rcq, err = d.CreateCQ(16); err != nil {
		t.close()
		return nil, fmt.Errorf("mcast: %w", err)
	}
	if t.mq, err = t.pd.CreateQP(roce.QPConfig{Type: roce.OOO, SendCQ: t.mqCQ, RecvCQ: t.rcq, MaxSendWR: t.maxWR, MaxRecvWR: 1}); err != nil {
		t.close()
		return nil, fmt.Errorf("mcast: %w", err)
	}
	var opts *roce.ConnectOptions
	if !cfg.Group.IsMulticast() { // a broadcast (CheckDest): its MAC, not a neighbour's
		o := roce.DefaultConnectOptions()
		o.DstMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		opts = &o
	}
	if err := t.mq.Connect(0, roce.Endpoint{QPN: roce.MulticastQPN, GID: roce.GIDFromIP(cfg.Group)}, opts); err != nil {
		t.close()
		return nil, fmt.Errorf("mcast: %w", err)
	}
	return t, nil
}

// connect makes this side's queue pair for the member (gid, qpn): unicast
// retries go out on it, the member's acknowledgements come to it.
func (t *transport) connect(gid netip.Addr, qpn uint32) (*roce.QP, error) {
	q, err := t.pd.CreateQP(roce.QPConfig{Type: roce.OOO, SendCQ: t.ackCQ, RecvCQ: t.rcq, MaxSendWR: t.maxWR, MaxRecvWR: 1})
	if err != nil {
		return nil, fmt.Errorf("mcast: %w", err)
	}
	t.qps = append(t.qps, q)
	if err := q.Connect(0, roce.Endpoint{QPN: qpn, GID: roce.GIDFromIP(gid)}, nil); err != nil {
		return nil, fmt.Errorf("mcast: connect to member %v: %w", gid, err)
	}
	return q, nil
}

func (t *transport) close() {
	if t.closed {
		return
	}
	t.closed = true
	for _, q := range append(t.qps, t.mq) {
		if q != nil {
			q.Destroy()
		}
	}
	if t.mr != nil {
		t.mr.Deregister()
	}
	t.pd.Dealloc()
}

// post sends operation op of the file on q to group context x with tid.
func (t *transport) post(q *roce.QP, op int, x roce.Ctx, tid uint32) error {
	off := op * t.chunk
	n := min(t.chunk, len(t.data)-off)
	return q.PostSend(roce.SendWR{ID: uint64(op), Opcode: roce.WROOOWrite,
		SGL:        []roce.SGE{{Addr: t.mr.Addr() + uint64(off), Length: uint32(n), LKey: t.mr.LKey()}},
		RemoteAddr: uint64(off), RemoteCtx: x, TID: tid, Notify: roce.NotifyInitiator, Tag: uint32(op)})
}

// slot is one group context's operation in flight.
type slot struct {
	op   int // -1: free
	tid  uint32
	busy bool
}

// stream sends operations 0..nops-1, Ctxs in flight, each multicast once
// on its group context; a member that does not acknowledge one in time gets
// it again, unicast, with its context's tid + 1; a member that does not
// acknowledge after MaxTries is given up. It returns the acknowledgements
// that named a tid no longer current.
func (s *sender) stream(ctx context.Context, t *transport, base uint32, key uint8, nops int) (stale int, err error) {
	cfg := &s.cfg
	slots := make([]slot, cfg.Ctxs)
	next, done := 0, 0
	wcs := make([]roce.WC, 256)
	for done < nops {
		if err := ctx.Err(); err != nil {
			return stale, err
		}
		now := time.Now()
		// Fill free slots.
		for k := range slots {
			sl := &slots[k]
			if sl.busy || next >= nops || !s.anyAlive() {
				continue
			}
			sl.op, sl.busy = next, true
			sl.tid++
			for _, m := range s.members {
				if m.alive && m.tid[k] >= sl.tid {
					sl.tid = m.tid[k] + 1
				}
			}
			for _, m := range s.members {
				if m.alive {
					m.tid[k], m.tries[k], m.acked[k] = sl.tid, 1, false
					m.due[k] = now.Add(cfg.Timeout)
				}
			}
			if err := t.post(t.mq, sl.op, roce.MakeCtx(base+uint32(k), key), sl.tid); err != nil {
				return stale, fmt.Errorf("mcast: post operation %d: %w", sl.op, err)
			}
			next++
		}
		// Acknowledgements.
		n, _ := t.ackCQ.Poll(wcs)
		if n == 0 {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			n, _ = t.ackCQ.Wait(wctx, wcs)
			cancel()
		}
		for _, wc := range wcs[:n] {
			m := s.byQPN[wc.QPN]
			k := int(wc.Ctx.ID()) - int(base)
			switch {
			case m == nil:
			case wc.Status != roce.WCSuccess:
				cfg.Log.Warn("unicast retry failed locally", "member", m.gid, "status", wc.Status)
			case wc.Opcode != roce.WCOOODelivered || k < 0 || k >= len(slots) || !slots[k].busy || wc.TID != m.tid[k] || m.acked[k]:
				stale++
			default:
				m.acked[k] = true
				m.res.Acked++
			}
		}
		// Completed operations, timeouts.
		now = time.Now()
		for k := range slots {
			sl := &slots[k]
			if !sl.busy {
				continue
			}
			waiting := false
			for _, m := range s.members {
				if !m.alive || m.acked[k] {
					continue
				}
				if now.Before(m.due[k]) {
					waiting = true
					continue
				}
				if m.tries[k] >= cfg.MaxTries {
					m.alive = false
					m.res.Error = fmt.Sprintf("operation %d not acknowledged after %d tries", sl.op, m.tries[k])
					cfg.Log.Warn("member given up", "member", m.gid, "op", sl.op)
					continue
				}
				m.tid[k]++
				m.tries[k]++
				m.due[k] = now.Add(min(cfg.Timeout<<(m.tries[k]-1), 2*time.Second))
				if err := t.post(m.qp, sl.op, roce.MakeCtx(base+uint32(k), key), m.tid[k]); err != nil {
					return stale, fmt.Errorf("mcast: retry operation %d to %v: %w", sl.op, m.gid, err)
				}
				m.res.Retries++
				m.res.RetryBytes += int64(min(t.chunk, len(t.data)-sl.op*t.chunk))
				waiting = true
			}
			if !waiting {
				sl.busy = false
				done++
			}
		}
		if !s.anyAlive() && done < nops {
			return stale, nil // every member given up: nothing left to send to
		}
	}
	return stale, nil
}

func (s *sender) anyAlive() bool {
	for _, m := range s.members {
		if m.alive {
			return true
		}
	}
	return false
}
