package toolpeer

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// UDQKey is the Q_Key ibv_ud_pingpong gives its queue pair and puts in its sends.
const UDQKey = 0x11111111

// activateUD takes a UD queue pair to RTS with ibv_ud_pingpong's Q_Key (and Connect's path
// MTU, which bounds a UD message, when set) and makes the address handle of the peer r (from
// this side's GID, as the tool's -g does).
func (p *Peer) activateUD(r cm.PingpongDest) (*roce.AH, error) {
	var sgid netip.Addr
	init := roce.Attr{State: roce.StateInit, QKey: UDQKey}
	mask := roce.AttrState | roce.AttrQKey
	if c := p.Connect; c != nil {
		sgid = c.SGID
		if c.PathMTU != 0 {
			init.PathMTU = c.PathMTU
			mask |= roce.AttrPathMTU
		}
	}
	if err := p.QP.Modify(&init, mask); err != nil {
		return nil, err
	}
	if err := p.QP.Modify(&roce.Attr{State: roce.StateRTR}, roce.AttrState); err != nil {
		return nil, err
	}
	if err := p.QP.Modify(&roce.Attr{State: roce.StateRTS, SQPSN: p.psn()}, roce.AttrState|roce.AttrSQPSN); err != nil {
		return nil, err
	}
	av, err := p.QP.Device().ResolveAV(netip.AddrFrom16(r.GID), sgid)
	if err != nil {
		return nil, err
	}
	return &roce.AH{AV: av, QPN: r.QPN, QKey: UDQKey}, nil
}

func (p *Peer) sendAH(off, size int, ah *roce.AH) error {
	if err := p.QP.PostSendAH(roce.SendWR{ID: toolSendID, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: p.sge(off, size)}, ah); err != nil {
		return fmt.Errorf("toolpeer: post send: %w", err)
	}
	return nil
}
