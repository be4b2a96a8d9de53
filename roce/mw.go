package roce

import (
	"fmt"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/qp"
)

// Memory windows (ibv_alloc_mw, ibv_bind_mw, IBV_WR_BIND_MW,
// IBV_WR_LOCAL_INV; roce/mr/mw.go has the rules). A window lends a peer part
// of a region registered with MWBind under an rkey of its own; the
// responder checks a window's rkey as a region's (inside the window, the
// window's access, a type 2B window only on its queue pair), and answers
// anything else with a remote access error NAK.

// Memory window vocabulary.
type (
	MW       = mr.MW
	MWType   = mr.MWType
	BindInfo = mr.BindInfo // what a window is bound to (ibv_mw_bind_info)
	BindWR   = qp.BindWR   // SendWR.Bind of a WRBindMW
)

// Window types and the access flags of windows.
const (
	MWType1   = mr.MWType1   // bound with QP.BindMW; never invalidated
	MWType2B  = mr.MWType2B  // bound with a WRBindMW to one queue pair; WRLocalInv or a peer's WRSendInv frees it
	MWBind    = mr.MWBind    // IBV_ACCESS_MW_BIND: a region windows may be bound to
	ZeroBased = mr.ZeroBased // IBV_ACCESS_ZERO_BASED: a type 2B window addressed from 0
)

// Local work requests and their completions.
const (
	WRBindMW   = qp.WRBindMW
	WRLocalInv = qp.WRLocalInv
	WCBindMW   = qp.WCBindMW
	WCLocalInv = qp.WCLocalInv
)

// ErrBound is the error of MR.Deregister while windows are bound to it.
var ErrBound = mr.ErrBound

// IncRKey returns rkey with its key byte incremented (ibv_inc_rkey): the
// rkey to give a type 2B window's next bind.
func IncRKey(rkey uint32) uint32 { return mr.IncRKey(rkey) }

// AllocMW allocates a memory window of type t in the PD. Release it with
// MW.Dealloc.
func (p *PD) AllocMW(t MWType) (*MW, error) {
	w, err := p.pd.AllocMW(t)
	if err != nil {
		return nil, fmt.Errorf("roce: %w", err)
	}
	return w, nil
}

// BindMW binds the type 1 window w to info through the send queue
// (ibv_bind_mw): the bind completes as a WCBindMW work completion with id
// (when flags has Signaled, or on error), and the returned rkey is the
// window's once it is executed. Length 0 unbinds.
func (q *QP) BindMW(w *MW, id uint64, flags SendFlags, info BindInfo) (uint32, error) {
	return q.q.BindMW(w, id, flags, info)
}
