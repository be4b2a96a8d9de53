package roce

import "github.com/xdproce/xdproce/roce/qp"

// State returns the queue pair's state as the application sees it: what the
// last Modify set, or StateError as soon as the engine has failed the queue
// pair (a retry count exhausted, a fatal NAK).
func (q *QP) State() QPState { return q.q.State() }

// Query returns the queue pair's state and attributes (ibv_query_qp).
func (q *QP) Query() (QPState, Attr) { return q.q.Query() }

// QPStats are the event counters of one queue pair. They only grow.
type QPStats struct {
	Retransmits             uint64   // packets sent again (go-back-N, RNR, timeout)
	Timeouts                uint64   // local ACK timeouts
	FastRetransmits         uint64   // resends because an ACK asked for was overdue by the round trip
	SpuriousFastRetransmits uint64   // fast retransmits an ACK for the original packets proved needless
	SeqNAKsSent             uint64   // PSN sequence error NAKs sent
	SeqNAKsRecv             uint64   // PSN sequence error NAKs received
	RNRNAKsSent             uint64   // RNR NAKs sent
	RNRNAKsRecv             uint64   // RNR NAKs received
	Duplicates              uint64   // duplicate requests received
	Replays                 uint64   // READ responses regenerated, atomic results replayed
	Dropped                 uint64   // packets dropped (state, sequence, Q_Key, malformed, stale)
	ErrNAKsSent             uint64   // invalid request, remote access and remote operation NAKs sent
	EncodeErrors            uint64   // frames the engine failed to encode (a bug)
	OOO                     OOOStats // OOO queue pairs (zero for the others)
	SR                      SRStats  // selective repeat (zero for go-back-N queue pairs)
	CC                      CCStats  // congestion control (docs/cc.md)
}

// Stats returns the queue pair's counters (also after Destroy).
func (q *QP) Stats() QPStats { return qpStats(q.q) }

func qpStats(q *qp.QP) QPStats {
	c := q.Stats()
	return QPStats{
		Retransmits:             c.Get(qp.CtrRetransmits),
		Timeouts:                c.Get(qp.CtrTimeouts),
		FastRetransmits:         c.Get(qp.CtrFastRetransmits),
		SpuriousFastRetransmits: c.Get(qp.CtrSpuriousFastRetransmits),
		SeqNAKsSent:             c.Get(qp.CtrSeqNAKsSent),
		SeqNAKsRecv:             c.Get(qp.CtrSeqNAKsRecv),
		RNRNAKsSent:             c.Get(qp.CtrRNRNAKsSent),
		RNRNAKsRecv:             c.Get(qp.CtrRNRNAKsRecv),
		Duplicates:              c.Get(qp.CtrDuplicates),
		Replays:                 c.Get(qp.CtrReplays),
		Dropped:                 c.Get(qp.CtrDropped),
		ErrNAKsSent:             c.Get(qp.CtrErrNAKsSent),
		EncodeErrors:            c.Get(qp.CtrEncodeErrors),
		OOO:                     oooStats(c),
		SR:                      srStats(c),
		CC:                      ccStats(c),
	}
}
