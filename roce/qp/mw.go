package qp

import (
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// Local work requests: memory window binds (type 1 through BindMW, type 2B
// through WRBindMW) and local invalidation (WRLocalInv). They send no
// packet: the requester executes each when it reaches it in the send queue
// (after every earlier request went out; with Fence, after earlier READs
// and atomics completed, as rxe does), and the completer retires it in
// order with the others. A failure completes it with IBV_WC_MW_BIND_ERR
// (bind) or IBV_WC_LOC_QP_OP_ERR (invalidate) and moves the QP to Error.

// A BindWR is the bind of a WRBindMW (ibv_send_wr.bind_mw): the type 2B
// window MW gets RKey (its index, the top 24 bits of MW.RKey(), with a new
// key byte: mr.IncRKey) and Info.
type BindWR struct {
	MW   *mr.MW
	RKey uint32
	Info mr.BindInfo
}

func (o WROpcode) isLocal() bool { return o == WRBindMW || o == WRLocalInv }

// checkLocalSend checks a local work request at post.
func (q *QP) checkLocalSend(wr *SendWR) error {
	if q.typ != RC && q.typ != UC {
		return fmt.Errorf("qp: post send: %v on a %v queue pair", wr.Opcode, q.typ)
	}
	if len(wr.SGL) != 0 {
		return fmt.Errorf("qp: post send: %v takes no SGL", wr.Opcode)
	}
	if wr.Opcode == WRBindMW {
		w := wr.Bind.MW
		switch {
		case w == nil:
			return errors.New("qp: post send: IBV_WR_BIND_MW without a window")
		case w.Type() != mr.MWType2B:
			return fmt.Errorf("qp: post send: IBV_WR_BIND_MW of an %v window (bind it with BindMW)", w.Type())
		case wr.Bind.RKey>>8 != w.RKey()>>8:
			return fmt.Errorf("qp: post send: rkey %#x is not of window %#x", wr.Bind.RKey, w.RKey())
		case wr.Bind.Info.MR == nil:
			return errors.New("qp: post send: IBV_WR_BIND_MW without a region")
		}
	}
	return nil
}

// BindMW binds the type 1 window w to info (ibv_bind_mw) by posting a bind
// work request with id and flags on the send queue, and returns the rkey the
// window will have once the bind is executed (w's last handed out, key byte
// incremented; mr.MW.NextRKey). Length 0 (and no region) unbinds. Errors
// found at post (wrong window type, no region with a length, a zero-based
// window, a region of another PD) are returned; the rest come as an
// IBV_WC_MW_BIND_ERR completion.
func (q *QP) BindMW(w *mr.MW, id uint64, flags SendFlags, info mr.BindInfo) (uint32, error) {
	switch {
	case w == nil:
		return 0, errors.New("qp: bind mw: no window")
	case w.Type() != mr.MWType1:
		return 0, fmt.Errorf("qp: bind mw: an %v window (bind it with a WRBindMW work request)", w.Type())
	case info.MR == nil && (info.Addr != 0 || info.Length != 0):
		return 0, errors.New("qp: bind mw: an address or length without a region")
	case info.Access&mr.ZeroBased != 0:
		return 0, errors.New("qp: bind mw: a type 1 window cannot be zero-based")
	case info.MR != nil && info.MR.PD() != w.PD():
		return 0, fmt.Errorf("qp: bind mw: %w", mr.ErrPDMismatch)
	case q.typ != RC && q.typ != UC:
		return 0, fmt.Errorf("qp: bind mw: on a %v queue pair", q.typ)
	}
	rkey := w.NextRKey()
	wr := SendWR{ID: id, Opcode: WRBindMW, Flags: flags, Bind: BindWR{MW: w, RKey: rkey, Info: info}}
	q.mu.Lock()
	err := q.postSendLocked(&wr)
	q.mu.Unlock()
	if err != nil {
		return 0, err
	}
	q.ring()
	return rkey, nil
}

// reqLocal executes the local work request the requester reached; it takes
// no PSN (its range is empty: firstPSN..firstPSN-1).
func (q *QP) reqLocal() (reqState, WCStatus) {
	r, w := &q.req, q.req.w
	switch w.opcode {
	case WRBindMW:
		if q.tbl.BindMW(w.bind.MW, q, q.pd, w.bind.RKey, w.bind.Info) != nil {
			return reqLocalError, WCMWBindErr
		}
	case WRLocalInv:
		if q.tbl.InvalidateRKey(q.pd, nil, w.invRKey) != nil {
			return reqLocalError, WCLocQPOpErr
		}
	}
	w.started, w.done, w.status = true, true, WCSuccess
	w.firstPSN, w.readPSN = r.psn, r.psn
	w.lastPSN = wire.PSNAdd(r.psn, wire.PSNMask)
	w.bind = BindWR{} // the window and region are not held past the bind
	r.idx++
	r.off = 0
	return reqGetWQE, 0
}
