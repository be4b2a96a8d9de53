package roce

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xdproce/xdproce/roce/qp"
)

// A Counter is one named counter of a Snapshot. Counters only grow, except
// gauges (Snapshot.QPs), which are not Counters.
type Counter struct {
	Name  string
	Value uint64
}

// Counters is a list of counters in a fixed order. It marshals to a JSON
// object whose keys keep that order ({"sent_pkts": 12, ...}) and unmarshals
// from one the same way.
type Counters []Counter

// Get returns the value of the counter called name and whether there is one.
func (cs Counters) Get(name string) (uint64, bool) {
	for _, c := range cs {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}

// MarshalJSON writes the counters as one JSON object, in order.
func (cs Counters) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(c.Name)
		b.Write(k)
		fmt.Fprintf(&b, ":%d", c.Value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads a JSON object of unsigned integers, keeping its order.
func (cs *Counters) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("roce: counters: want a JSON object")
	}
	out := (*cs)[:0]
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("roce: counters: %w", err)
		}
		name, _ := t.(string)
		var v uint64
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("roce: counters: %s: %w", name, err)
		}
		out = append(out, Counter{Name: name, Value: v})
	}
	*cs = out
	return nil
}

// QPSnapshot is one queue pair's counters.
type QPSnapshot struct {
	QPN      uint32   `json:"qpn"`
	Type     string   `json:"type"`  // "RC", "UC", "UD", "OOO"
	State    string   `json:"state"` // "RTS", ...
	Counters Counters `json:"counters"`
}

// A Snapshot is what a Device has counted, read at one moment. The names and
// their meanings are listed in docs/counters.md: first those of rxe's
// hw_counters with the same meaning, then xdproce's own.
type Snapshot struct {
	Time   time.Time `json:"time"`
	Device string    `json:"device"` // interface name ("" for NewDevice)
	Link   string    `json:"link"`   // LinkName
	QPs    int       `json:"qps"`    // queue pairs alive
	// Counters are the device's, the queue pairs' summed in (destroyed ones
	// included).
	Counters Counters `json:"counters"`
	// XDP holds the steering program's verdict counters (frames) and the
	// AF_XDP sockets' statistics, nil when the device has no XDP program;
	// XDPError says why some or all of them could not be read.
	XDP      Counters `json:"xdp,omitempty"`
	XDPError string   `json:"xdp_error,omitempty"`
	// PerQP holds each live queue pair's counters, by QPN, when asked for.
	PerQP []QPSnapshot `json:"per_qp,omitempty"`
}

// qpCounters are the roce/qp counters a Snapshot reports, in order, with
// their names (rxe's where the meaning is the same).
var qpCounters = [...]struct {
	name string
	c    qp.Counter
}{
	{"duplicate_request", qp.CtrDuplicates},
	{"out_of_seq_request", qp.CtrSeqNAKsSent},
	{"rcvd_rnr_err", qp.CtrRNRNAKsRecv},
	{"send_rnr_err", qp.CtrRNRNAKsSent},
	{"rcvd_seq_err", qp.CtrSeqNAKsRecv},
	{"retry_exceeded_err", qp.CtrRetryExceeded},
	{"retry_rnr_exceeded_err", qp.CtrRNRRetryExceeded},
	{"completer_retry_err", qp.CtrCompleterRetries},
	{"rdma_sends", qp.CtrSendsDone},
	{"rdma_recvs", qp.CtrRecvsDone},
	{"retransmits", qp.CtrRetransmits},
	{"timeouts", qp.CtrTimeouts},
	{"fast_retransmits", qp.CtrFastRetransmits},
	{"spurious_fast_retransmits", qp.CtrSpuriousFastRetransmits},
	{"replays", qp.CtrReplays},
	{"err_naks_sent", qp.CtrErrNAKsSent},
	{"qp_dropped", qp.CtrDropped},
	{"encode_errors", qp.CtrEncodeErrors},
	{"stale_ctx", qp.CtrStaleCtx},
	{"stale_tid", qp.CtrStaleTID},
	{"dup_index", qp.CtrDupIndex},
	{"ooo_completions_sent", qp.CtrOOOCompletionsSent},
	{"ooo_completions_received", qp.CtrOOOCompletionsRecv},
	{"ooo_protection_errors", qp.CtrOOOProtErrors},
	{"ooo_read_busy", qp.CtrOOOReadBusy},
	{"ooo_work_overflow", qp.CtrOOOWorkOverflow},
	{"ooo_3p_refused", qp.CtrOOO3PRefused},
	{"out_of_sequence_placed", qp.CtrSROutOfSequence},
	{"sack_sent", qp.CtrSACKsSent},
	{"sack_received", qp.CtrSACKsRecv},
	{"selective_retransmits", qp.CtrSRRetransmits},
	{"np_cnp_sent", qp.CtrCNPSent},
	{"np_ecn_marked_roce_packets", qp.CtrECNMarked},
	{"rp_cnp_handled", qp.CtrCNPHandled},
	{"rp_cnp_ignored", qp.CtrCNPIgnored},
}

// qpTotals are sums of qpCounters, in their order.
type qpTotals [len(qpCounters)]uint64

func (t *qpTotals) add(q *qp.QP) {
	s := q.Stats()
	for i, c := range qpCounters {
		t[i] += s.Get(c.c)
	}
}

// value returns the total of the qpCounters entry called name.
func (t *qpTotals) value(name string) uint64 {
	for i, c := range qpCounters {
		if c.name == name {
			return t[i]
		}
	}
	panic("roce: no queue-pair counter " + name)
}

// Snapshot reads the device's counters, and each live queue pair's when
// perQP is set. It reads what the progress engine has published at the end
// of its rounds, the queue pairs' atomic counters and, over AF_XDP, the XDP
// program's map and the sockets' statistics (a system call each): it never
// waits for the engine nor takes a lock the engine takes while it moves
// frames, so it may be called at any rate from any goroutine.
func (d *Device) Snapshot(perQP bool) *Snapshot {
	s := &d.st
	snap := &Snapshot{Time: time.Now(), Device: d.ifname, Link: d.props.Name}
	var t qpTotals
	d.mu.Lock()
	t = d.retiredQP
	snap.QPs = len(d.qps)
	var live []*qpEntry
	for _, e := range d.qps {
		t.add(e.q)
		if perQP {
			live = append(live, e)
		}
	}
	d.mu.Unlock()
	cs := make(Counters, 0, 40)
	add := func(name string, v uint64) { cs = append(cs, Counter{name, v}) }
	add("sent_pkts", s.txSent.Load())
	add("rcvd_pkts", s.delivered.Load())
	for _, name := range []string{"duplicate_request", "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err"} {
		add(name, t.value(name))
	}
	// rxe counts response packets it queued behind others for its completer
	// task; the engine hands every response to its queue pair at once.
	add("ack_deferred", 0)
	for _, name := range []string{"retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err"} {
		add(name, t.value(name))
	}
	add("send_err", s.txLost.Load())
	add("rdma_sends", t.value("rdma_sends"))
	add("rdma_recvs", t.value("rdma_recvs"))
	for _, name := range []string{"retransmits", "timeouts", "fast_retransmits", "spurious_fast_retransmits",
		"replays", "err_naks_sent", "qp_dropped", "encode_errors", "stale_ctx", "stale_tid", "dup_index",
		"ooo_completions_sent", "ooo_completions_received", "ooo_protection_errors", "ooo_read_busy",
		"ooo_work_overflow", "out_of_sequence_placed", "sack_sent", "sack_received", "selective_retransmits"} {
		add(name, t.value(name))
	}
	add("icrc_errors", s.dropBadICRC.Load())
	add("malformed", s.dropMalformed.Load())
	add("not_roce", s.dropNotRoCE.Load())
	add("unknown_qpn", s.dropUnknownQPN.Load())
	add("rx_frames", s.rxFrames.Load())
	add("rx_bytes", s.rxBytes.Load())
	add("tx_frames", s.txFrames.Load())
	add("tx_bytes", s.txBytes.Load())
	add("tx_no_buffer", s.txNoBuffer.Load())
	add("link_send_errors", s.txErrors.Load())
	add("link_receive_errors", s.rxErrors.Load())
	add("engine_rounds", s.rounds.Load())
	add("engine_naps", s.naps.Load())
	add("engine_wakeups", s.wakeups.Load())
	add("engine_handoffs", s.handoffs.Load())
	add("engine_handoff_stalls", s.handStalls.Load())
	add("engine_handoff_drops", s.handDrops.Load())
	snap.Counters = cs
	if d.xdpCounters != nil {
		xdp, err := d.xdpCounters()
		if err != nil {
			snap.XDPError = err.Error()
		}
		if len(xdp) > 0 {
			snap.XDP = xdp
		}
	}
	if perQP {
		slices.SortFunc(live, func(a, b *qpEntry) int { return int(a.qpn) - int(b.qpn) })
		for _, e := range live {
			st := e.q.Stats()
			qs := QPSnapshot{QPN: e.qpn, Type: e.q.Type().String(), State: e.q.State().String(),
				Counters: make(Counters, len(qpCounters))}
			for i, c := range qpCounters {
				qs.Counters[i] = Counter{c.name, st.Get(c.c)}
			}
			snap.PerQP = append(snap.PerQP, qs)
		}
	}
	return snap
}

// FlushCapture writes out what the capture (Options.Capture) has buffered, so
// that the file can be read while the device runs. It does nothing without a
// capture.
func (d *Device) FlushCapture() error {
	if d.capw == nil {
		return nil
	}
	return d.capw.Flush()
}
