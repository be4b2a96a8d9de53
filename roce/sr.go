package roce

import "github.com/xdproce/xdproce/roce/qp"

// SRHold is how many PSNs past a hole a queue pair with selective repeat
// holds: what xdproce tells a peer for its ConnectOptions.SRWindow.
const SRHold = qp.SRHold

// SRStats are the selective-repeat counters of RC queue pairs connected
// with ConnectOptions.Reliability SelectiveRepeat (docs/sr-wire.md); zero
// for the others.
type SRStats struct {
	OutOfSequencePlaced  uint64 // requests held past a hole until it was filled (out_of_sequence_placed)
	SACKsSent            uint64 // SR_SACK packets sent (sack_sent)
	SACKsRecv            uint64 // SR_SACK packets received (sack_received)
	SelectiveRetransmits uint64 // single packets resent because a SACK or a timer showed them missing (also in Retransmits)
}

func srStats(c *qp.Stats) SRStats {
	return SRStats{
		OutOfSequencePlaced:  c.Get(qp.CtrSROutOfSequence),
		SACKsSent:            c.Get(qp.CtrSACKsSent),
		SACKsRecv:            c.Get(qp.CtrSACKsRecv),
		SelectiveRetransmits: c.Get(qp.CtrSRRetransmits),
	}
}

func (s *SRStats) add(o SRStats) {
	s.OutOfSequencePlaced += o.OutOfSequencePlaced
	s.SACKsSent += o.SACKsSent
	s.SACKsRecv += o.SACKsRecv
	s.SelectiveRetransmits += o.SelectiveRetransmits
}
