package roce

import (
	"fmt"

	"github.com/xdproce/xdproce/roce/qp"
)

// CongestionControl is an RC queue pair's congestion control
// (ConnectOptions.CC, docs/cc.md).
type CongestionControl uint8

// Congestion controls.
const (
	CCNone CongestionControl = iota // no pacing, no CNPs (rxe; every peer that did not agree)
	DCQCN                           // DCQCN: ECT(0) frames, CNPs for CE-marked ones, the requester paced (xdproce peers)
)

// String returns "none" or "dcqcn", the --cc values.
func (c CongestionControl) String() string {
	switch c {
	case CCNone:
		return "none"
	case DCQCN:
		return "dcqcn"
	}
	return fmt.Sprintf("CongestionControl(%d)", uint8(c))
}

// ParseCC parses a --cc value: "none" or "dcqcn".
func ParseCC(s string) (CongestionControl, error) {
	switch s {
	case "none":
		return CCNone, nil
	case "dcqcn":
		return DCQCN, nil
	}
	return 0, fmt.Errorf("roce: congestion control %q: want none or dcqcn", s)
}

// DCQCNParams are DCQCN's parameters (QPConfig.DCQCN; zero fields take
// DefaultDCQCN's).
type DCQCNParams = qp.DCQCNParams

// DefaultDCQCN holds DCQCN's defaults: ConnectX's where they work on the
// engine's clock, scaled where they cannot (docs/cc.md).
var DefaultDCQCN = qp.DefaultDCQCN

// ECN codepoints of the IP TOS / traffic class low bits (RFC 3168).
const (
	ECNMask = 3
	ECT0    = 2
	ECNCE   = 3
)

// ccAttr sets DCQCN on the RTR step of Connect when opt asks for it (RC
// only) and returns the TOS the queue pair's frames carry: with DCQCN,
// opt.TOS's DSCP with ECT(0) unless opt.NoECT.
func ccAttr(t QPType, opt *ConnectOptions, a *qp.Attr, m *qp.AttrMask) (uint8, error) {
	switch {
	case opt.CC > DCQCN:
		return 0, fmt.Errorf("%v", opt.CC)
	case opt.CC == DCQCN && t == qp.RC:
		a.DCQCN = true
		*m |= qp.AttrDCQCN
		if !opt.NoECT {
			return opt.TOS&^ECNMask | ECT0, nil
		}
	}
	return opt.TOS, nil
}

// CCStats are the congestion-control counters of RC queue pairs, named as
// mlx5's hw_counters (docs/counters.md).
type CCStats struct {
	CNPSent    uint64 // CNPs sent for CE-marked frames (np_cnp_sent)
	ECNMarked  uint64 // frames received with ECN CE (np_ecn_marked_roce_packets)
	CNPHandled uint64 // CNPs received and handed to DCQCN (rp_cnp_handled)
	CNPIgnored uint64 // CNPs received without DCQCN on (rp_cnp_ignored)
}

func ccStats(c *qp.Stats) CCStats {
	return CCStats{
		CNPSent:    c.Get(qp.CtrCNPSent),
		ECNMarked:  c.Get(qp.CtrECNMarked),
		CNPHandled: c.Get(qp.CtrCNPHandled),
		CNPIgnored: c.Get(qp.CtrCNPIgnored),
	}
}

func (s *CCStats) add(o CCStats) {
	s.CNPSent += o.CNPSent
	s.ECNMarked += o.ECNMarked
	s.CNPHandled += o.CNPHandled
	s.CNPIgnored += o.CNPIgnored
}
