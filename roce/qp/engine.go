package qp

import (
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/wire"
)

// Output is where the engines put frames: the device's transmit batch.
type Output interface {
	// TxBuffer returns a transmit buffer (len ≥ path MTU + 58 bytes), or nil
	// when none is free now.
	TxBuffer() []byte
	// TxCommit queues a frame, a prefix of a buffer from TxBuffer.
	TxCommit(frame []byte)
}

// engine is the state shared by the three engines, owned by the progress
// goroutine.
type engine struct {
	state   State
	attr    Attr
	ctlSeen uint32
	pmtu    uint32
	now     int64
	hdr     wire.Packet // header template: addresses, ports, P_Key, dest QPN
	pkt     wire.Packet // the packet being built
	// errPending: a final NAK must go out before the QP falls silent.
	finalNAK bool
	failures uint32 // fail calls (Failures)
	resets   uint32 // resetEngines calls (Resets)
}

// Counter indexes the counters of Stats.
type Counter int

// Counters.
const (
	CtrRetransmits             Counter = iota // packets sent again (go-back-N, RNR, timeout)
	CtrTimeouts                               // local ACK timeouts
	CtrFastRetransmits                        // resends because an ACK asked for was overdue by the round trip
	CtrSeqNAKsSent                            // PSN sequence error NAKs sent
	CtrSeqNAKsRecv                            // PSN sequence error NAKs received
	CtrRNRNAKsSent                            // RNR NAKs sent
	CtrRNRNAKsRecv                            // RNR NAKs received
	CtrDuplicates                             // duplicate requests received
	CtrReplays                                // READ responses regenerated / atomic results replayed
	CtrDropped                                // packets dropped (state, sequence, Q_Key, malformed, stale)
	CtrErrNAKsSent                            // invalid request / remote access / remote op NAKs sent
	CtrEncodeErrors                           // frames the engine failed to encode (a bug)
	CtrSpuriousFastRetransmits                // fast retransmissions an ACK for the original transmission proved needless
	CtrCompleterRetries                       // resends the completer started on a sequence NAK, an implied NAK or a local ACK timeout
	CtrRetryExceeded                          // work requests failed with RETRY_EXC_ERR (retry_cnt spent)
	CtrRNRRetryExceeded                       // work requests failed with RNR_RETRY_EXC_ERR (rnr_retry spent)
	CtrSendsDone                              // SEND work requests completed (successfully or in error; flushes not counted)
	CtrRecvsDone                              // receive work requests completed successfully
	// OOO queue pairs (docs/ooo.md).
	CtrStaleCtx           // OOO packets for a context not held by the QP or with another key (dropped)
	CtrStaleTID           // OOO packets and READ requests with an old tid, completions for a tid not outstanding (dropped)
	CtrDupIndex           // OOO packets whose index was already placed, duplicate completions (dropped)
	CtrOOOCompletionsSent // OOO_COMPLETION packets sent
	CtrOOOCompletionsRecv // OOO_COMPLETION packets that completed an operation
	CtrOOOProtErrors      // OOO packets refused for protection (rkey, bounds, access): their tid never completes
	CtrOOOReadBusy        // OOO READ requests ignored: the context was busy
	CtrOOOWorkOverflow    // READ responses or completions not queued: the QP's work queue was full
	CtrOOO3PRefused       // third-party packets for a controller or sink not admitted (dropped)
	// Selective repeat on RC queue pairs (docs/sr-wire.md).
	CtrSROutOfSequence // requests accepted past a hole and held until it was filled
	CtrSACKsSent       // SR_SACK packets sent
	CtrSACKsRecv       // SR_SACK packets received
	CtrSRRetransmits   // single packets resent because a SACK or a timer showed them missing
	// Congestion control (docs/cc.md), named as mlx5's hw_counters.
	CtrCNPSent    // np_cnp_sent: CNPs sent for CE-marked frames
	CtrECNMarked  // np_ecn_marked_roce_packets: frames received with ECN CE
	CtrCNPHandled // rp_cnp_handled: CNPs received and handed to DCQCN
	CtrCNPIgnored // rp_cnp_ignored: CNPs received without DCQCN on (dropped)
	numCounters
)

var counterNames = [...]string{"retransmits", "timeouts", "fast_retransmits", "seq_naks_sent", "seq_naks_recv",
	"rnr_naks_sent", "rnr_naks_recv", "duplicates", "replays", "dropped", "err_naks_sent", "encode_errors",
	"spurious_fast_retransmits", "completer_retries", "retry_exceeded", "rnr_retry_exceeded", "sends_done",
	"recvs_done", "stale_ctx", "stale_tid", "dup_index", "ooo_completions_sent", "ooo_completions_received",
	"ooo_protection_errors", "ooo_read_busy", "ooo_work_overflow", "ooo_3p_refused", "out_of_sequence_placed",
	"sack_sent", "sack_received", "selective_retransmits", "np_cnp_sent", "np_ecn_marked_roce_packets",
	"rp_cnp_handled", "rp_cnp_ignored"}

func (c Counter) String() string { return enumName(counterNames[:], int(c), "Counter") }

// Stats are event counters of a queue pair, safe to read from any goroutine.
type Stats struct{ c [numCounters]atomic.Uint64 }

// Get returns one counter.
func (s *Stats) Get(c Counter) uint64 { return s.c[c].Load() }

func (s *Stats) inc(c Counter) { s.c[c].Add(1) }

// Stats returns the queue pair's counters.
func (q *QP) Stats() *Stats { return &q.stats }

// applyCtl brings the engine up to date with Modify.
func (q *QP) applyCtl() {
	q.mu.Lock()
	c := q.ctl
	q.ctl = ctlRequest{}
	q.e.attr = q.attr
	target := q.state
	q.e.ctlSeen = q.ctlGen.Load()
	q.mu.Unlock()

	if c.toError && c.reset && target != Error {
		q.enterError()
	}
	if c.reset {
		q.resetEngines(c.sqMark, c.rqMark)
	}
	e := &q.e
	if target == Error {
		if e.state != Error {
			q.enterError()
		}
		return
	}
	if target >= RTR && e.state < RTR {
		q.resp.start(e.attr.RQPSN)
		q.resp.sr.enable(q.typ == RC && e.attr.SelectiveRepeat)
		q.ccStart(false)
	}
	if target == RTS && e.state < RTS {
		q.req.start(e.attr.SQPSN)
		q.comp.start(&e.attr)
		limit := q.window
		if q.winAuto && e.attr.SelectiveRepeat && e.attr.DCQCN {
			limit = DefaultSRSendWindow
		}
		if w := e.attr.SendWindow; w != 0 {
			limit = min(limit, w)
		}
		q.win.start(e.attr.SQPSN, limit, q.fixedWin)
		q.win.sr.enable(e.attr.SelectiveRepeat, &q.win, e.attr.SRWindow)
		q.ccStart(true)
	}
	q.win.setTimeout(timeoutNs(e.attr.Timeout))
	e.state = target
	q.buildTemplate()
}

// buildTemplate prepares the header fields every packet of the QP shares.
func (q *QP) buildTemplate() {
	e := &q.e
	mtu := e.attr.PathMTU
	if !mtu.Valid() {
		if q.typ == UD {
			mtu = defaultUDMTU
		} else {
			mtu = wire.MTU1024
		}
	}
	e.pmtu = uint32(mtu.Bytes())
	if q.typ != UD && e.attr.AV.SrcIP.IsValid() {
		sport := e.attr.AV.SrcPort
		switch {
		case sport != 0:
		case e.attr.AV.FlowLabel != 0: // as rxe: the port follows a given flow label
			sport = wire.SourcePortFromFlowLabel(e.attr.AV.FlowLabel)
		default:
			sport = wire.SourcePort(q.qpn, e.attr.DestQPN)
		}
		setAddr(&e.hdr, &e.attr.AV, sport)
		e.hdr.BTH.DestQPN = e.attr.DestQPN
	}
}

// setAddr fills the Ethernet/IP/UDP fields of p from av.
func setAddr(p *wire.Packet, av *AddressVector, sport uint16) {
	p.DstMAC, p.SrcMAC = av.DstMAC, av.SrcMAC
	p.HasVLAN, p.VLANTCI = av.VLAN != 0, av.VLAN
	s, d := av.SrcIP.Unmap(), av.DstIP.Unmap()
	p.IPv6 = !s.Is4()
	p.SrcIP, p.DstIP = s, d
	p.TOS = av.TOS
	p.TTL = av.TTL
	if p.TTL == 0 {
		p.TTL = 64
	}
	p.IPID = 0
	p.FlowLabel = 0
	p.IPFlags = 0
	if p.IPv6 {
		p.FlowLabel = av.FlowLabel
	} else {
		p.IPFlags = wire.IPv4DontFragment
	}
	p.SrcPort, p.DstPort = sport, wire.UDPPort
	p.UDPChecksum = 0
	p.BTH.PKey = 0xFFFF
}

// fromPeer reports whether an RC/UC packet came from the connected peer's
// address to this side's (rxe's check_addr): a host that guessed the QPN
// and PSN cannot inject into the connection from elsewhere.
func (q *QP) fromPeer(p *wire.Packet) bool {
	av := &q.e.attr.AV
	return p.SrcIP.Unmap() == av.DstIP.Unmap() && p.DstIP.Unmap() == av.SrcIP.Unmap()
}

// Receive handles one received packet for this QP: p is decoded with its ICRC
// checked and p.BTH.DestQPN == q.QPN(). Payload is copied out before Receive
// returns. Frames Receive wants to send (ACKs, NAKs, READ responses) go out
// from the next Progress, which the device must call after a batch of
// Receives; an OOO queue pair sends its completion packets from Receive
// when out has a buffer free (there is nothing to coalesce).
func (q *QP) Receive(p *wire.Packet, now int64, out Output) {
	q.e.now = now // before applyCtl: DCQCN starts its clock there
	if q.ctlGen.Load() != q.e.ctlSeen {
		q.applyCtl()
	}
	if q.e.state != RTR && q.e.state != RTS {
		q.stats.inc(CtrDropped)
		return
	}
	info, ok := p.BTH.Opcode.Info()
	if ok && info.Kind == wire.KindCNP && q.typ == RC {
		q.cnpReceived() // cc.go
		return
	}
	if !ok || !transportMatches(q.typ, info.Transport, q.resp.sr.on) {
		q.stats.inc(CtrDropped)
		return
	}
	if (q.typ == RC || q.typ == UC) && !q.fromPeer(p) {
		q.stats.inc(CtrDropped)
		return
	}
	if q.typ == OOO {
		q.oooReceive(p, out)
		return
	}
	if q.typ == RC {
		q.ccReceive(p) // ECN CE: a CNP is due (cc.go)
	}
	if info.Request {
		q.respond(p, &info)
	} else if q.typ == RC && q.e.state == RTS {
		q.complete(p, &info)
		q.retire()
	} else {
		q.stats.inc(CtrDropped)
	}
}

func transportMatches(t Type, tr wire.Transport, sr bool) bool {
	switch t {
	case RC:
		return tr == wire.RC || sr && tr == wire.SR
	case UC:
		return tr == wire.UC
	case OOO:
		return tr == wire.OOO
	}
	return tr == wire.UD
}

// Progress runs the engines: it applies Modify, sends pending responses
// (READ responses, atomic ACKs, ACK/NAK), sends what the requester's window
// allows, fires due timers and produces completions. It returns the time
// (ns, the clock of now) at which it wants to run again, now itself when it
// stopped for lack of transmit buffers or budget, or 0 for no deadline.
func (q *QP) Progress(now int64, out Output) int64 {
	q.e.now = now // before applyCtl: DCQCN starts its clock there
	if q.ctlGen.Load() != q.e.ctlSeen {
		q.applyCtl()
	}
	e := &q.e
	switch e.state {
	case Error:
		if e.finalNAK && q.sendAck(out) {
			e.finalNAK = false
		}
		q.flush()
		if e.finalNAK {
			return now
		}
		return 0
	case RTR, RTS:
	default:
		return 0
	}
	if q.typ == OOO {
		return q.oooProgress(out)
	}
	more := !q.sendCNP(out) // cc.go
	if !q.respProgress(out) {
		more = true
	}
	if e.state == RTS {
		q.timers()
		if e.state == RTS && !q.reqProgress(out) {
			more = true
		}
		q.retire()
	}
	if e.state == Error {
		q.flush()
		if e.finalNAK {
			return now
		}
		return 0
	}
	if more {
		return now
	}
	return q.deadline()
}

// emit encodes e.pkt (n payload bytes already at buf[HeaderLen():]) and
// commits it. It returns the frame's length (0: it failed to encode).
func (q *QP) emit(out Output, buf []byte, n int) int {
	fl, err := q.e.pkt.EncodeInPlace(buf, n)
	if err != nil {
		q.stats.inc(CtrEncodeErrors)
		return 0
	}
	out.TxCommit(buf[:fl])
	return fl
}

// fail moves the QP to Error from the engine (IBA 10.3: a QP enters Error
// on errors that prevent it from going on).
func (q *QP) fail() {
	q.mu.Lock()
	if q.state != Reset {
		q.state = Error
	}
	q.mu.Unlock()
	if q.e.state != Error {
		q.e.failures++
	}
	q.enterError()
}

// enterError moves the engine to Error and flushes.
func (q *QP) enterError() {
	q.e.state = Error
	q.resp.clearTx()
	q.win.stop()
	q.flush()
}

// flush completes every outstanding WQE (IBA 10.3, Error state: work
// requests complete with flush errors).
func (q *QP) flush() {
	posted := q.sqPosted.Load()
	sq := q.sq.Load() // after posted: it covers every index below
	for i := q.comp.first(); i != posted; i++ {
		w := sq.at(i)
		if !w.done {
			w.done, w.status = true, WCWRFlushErr
		}
	}
	q.req.skipTo(posted)
	q.retire()
	q.flushRecv()
}

// resetEngines discards WQEs posted before a reset and clears all state.
func (q *QP) resetEngines(sqMark, rqMark uint32) {
	q.req = requester{idx: sqMark}
	q.comp = completer{head: sqMark}
	q.win = sendWindow{}
	for _, w := range q.sq.Load().slots {
		w.started, w.done = false, false
	}
	q.sqDone.Store(sqMark)
	q.resp.reset(rqMark)
	q.rqDone.Store(rqMark)
	q.plc.reset() // place.go
	q.e.state = Reset
	q.e.finalNAK = false
	q.e.resets++
	q.initEngines()
}

func (q *QP) initEngines() {
	if q.ooo != nil {
		q.ooo.pkt, q.ooo.wLen = 0, 0
	}
	q.e.hdr = wire.Packet{}
	q.e.hdr.BTH.PKey = 0xFFFF
}

// deadline returns the earliest timer of the QP (0: none).
func (q *QP) deadline() int64 {
	return q.win.wake()
}

// timeoutNs is the local ACK timeout, 4.096 µs × 2^t (IBA 9.7); 0 when
// t == 0 (infinite).
func timeoutNs(t uint8) int64 {
	if t == 0 {
		return 0
	}
	return 4096 << t
}

// rnrTimerNs is the RNR NAK timer of code t (IBA 9.7, the AETH RNR timer encoding), in ns.
var rnrTimerNs = [32]int64{
	655360000, 10000, 20000, 30000, 40000, 60000, 80000, 120000,
	160000, 240000, 320000, 480000, 640000, 960000, 1280000, 1920000,
	2560000, 3840000, 5120000, 7680000, 10240000, 15360000, 20480000, 30720000,
	40960000, 61440000, 81920000, 122880000, 163840000, 245760000, 327680000, 491520000,
}

// npkts is the number of packets of a message of n bytes.
func npkts(n uint64, pmtu uint32) uint32 {
	if n == 0 {
		return 1
	}
	return uint32((n + uint64(pmtu) - 1) / uint64(pmtu))
}
