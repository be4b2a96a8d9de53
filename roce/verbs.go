package roce

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/qp"
)

// MaxCQDepth bounds CreateCQ.
const MaxCQDepth = 1 << 20

// CreateCQ makes a completion queue holding up to depth completions.
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	if depth <= 0 || depth > MaxCQDepth {
		return nil, fmt.Errorf("roce: create cq: depth %d out of range 1..%d", depth, MaxCQDepth)
	}
	if d.isClosed() {
		return nil, fmt.Errorf("roce: create cq: %w", d.closedErr())
	}
	return qp.NewCQ(depth), nil
}

func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// A PD is a protection domain: memory regions and queue pairs of one PD work
// together; those of different PDs do not.
type PD struct {
	d  *Device
	pd *mr.PD
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() *PD { return &PD{d: d, pd: d.tbl.AllocPD()} }

// Device returns the PD's device.
func (p *PD) Device() *Device { return p.d }

// RegMR registers buf with the given access; its address (IOVA) is the
// address of buf[0]. Deregister it with MR.Deregister: its keys are refused
// at once afterwards.
func (p *PD) RegMR(buf []byte, access Access) (*MR, error) {
	m, err := p.pd.Register(buf, access)
	if err != nil {
		return nil, fmt.Errorf("roce: reg mr: %w", err)
	}
	return m, nil
}

// RegMRIOVA registers buf at the given IOVA (the address remote peers use).
func (p *PD) RegMRIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	m, err := p.pd.RegisterIOVA(buf, iova, access)
	if err != nil {
		return nil, fmt.Errorf("roce: reg mr: %w", err)
	}
	return m, nil
}

// Dealloc frees the PD; it fails while memory regions or queue pairs use it.
func (p *PD) Dealloc() error {
	if err := p.pd.Dealloc(); err != nil {
		return fmt.Errorf("roce: dealloc pd: %w", err)
	}
	return nil
}

// QPConfig describes a queue pair to create.
type QPConfig struct {
	Type           QPType
	SendCQ, RecvCQ *CQ
	MaxSendWR      int // 0: DefaultMaxWR; at most MaxWR
	MaxRecvWR      int // 0: DefaultMaxWR; at most MaxWR
	MaxSGE         int // 0: DefaultMaxSGE; at most MaxSGE
	MaxInline      int // 0: DefaultMaxInline; -1: no inline data; at most MaxInline
	// QPN requests a specific QPN (e.g. 1 for the GSI QP); 0 allocates one,
	// counting up from 0x11 as rxe does.
	QPN uint32
	// SendWindow bounds the unacknowledged PSNs of an RC requester (0: the
	// roce/qp default). A small window makes go-back-N recovery cheap on
	// lossy paths.
	SendWindow int
	// DCQCN: the parameters of DCQCN for a queue pair connected with
	// ConnectOptions.CC DCQCN (zero fields: DefaultDCQCN; docs/cc.md).
	DCQCN DCQCNParams
	// SRQ: the queue pair (RC or UD) receives on this shared receive queue
	// of the same PD; MaxRecvWR is ignored and PostRecv refused.
	SRQ *SRQ
}

// A QP is a queue pair of a Device. Post and Modify may be called from any
// goroutine.
type QP struct {
	d   *Device
	pd  *PD
	e   *qpEntry
	q   *qp.QP
	typ QPType
}

// CreateQP creates a queue pair in the RESET state.
func (p *PD) CreateQP(cfg QPConfig) (*QP, error) {
	d := p.d
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, errors.New("roce: create qp: SendCQ and RecvCQ are required")
	}
	srq, err := d.srqOf(cfg.SRQ)
	if err != nil {
		return nil, fmt.Errorf("roce: create qp: %w", err)
	}
	var pool *qp.ContextPool
	if cfg.Type == qp.OOO {
		var err error
		if pool, err = d.contextPool(); err != nil {
			return nil, fmt.Errorf("roce: create qp: %w", err)
		}
	}
	e, err := d.addQP(cfg.QPN, func(n uint32) (*qp.QP, error) {
		q, err := qp.New(qp.Config{
			Type: cfg.Type, PD: p.pd, Table: d.tbl, SendCQ: cfg.SendCQ, RecvCQ: cfg.RecvCQ,
			MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSGE: cfg.MaxSGE,
			MaxInline: cfg.MaxInline, QPN: n, SendWindow: cfg.SendWindow, Contexts: pool, SRQ: srq,
			DCQCN: cfg.DCQCN,
		})
		if err != nil {
			return nil, fmt.Errorf("roce: create qp: %w", err)
		}
		return q, nil
	})
	if err != nil {
		return nil, err
	}
	return &QP{d: d, pd: p, e: e, q: e.q, typ: cfg.Type}, nil
}

// QPN is the queue pair number.
func (q *QP) QPN() uint32 { return q.e.qpn }

// Type is the queue pair's transport type.
func (q *QP) Type() QPType { return q.typ }

// Device is the queue pair's device.
func (q *QP) Device() *Device { return q.d }

// Modify changes the queue pair's state and attributes as ibv_modify_qp does.
// When the link forces a UDP source port (link/udp), the address vector's
// SrcPort is set to it.
func (q *QP) Modify(attr *Attr, mask AttrMask) error {
	if err := q.modify(attr, mask); err != nil {
		return fmt.Errorf("roce: modify qp %#x: %w", q.e.qpn, err)
	}
	return nil
}

// modify is Modify without the "roce: modify qp" context (Connect and
// Activate give their own).
func (q *QP) modify(attr *Attr, mask AttrMask) error {
	if attr == nil {
		return errors.New("nil attr")
	}
	if mask&qp.AttrAV != 0 && q.d.props.SrcPort != 0 && attr.AV.SrcPort != q.d.props.SrcPort {
		a := *attr
		a.AV.SrcPort = q.d.props.SrcPort
		attr = &a
	}
	if mask&qp.AttrAV != 0 && q.typ == RC && q.d.shared != nil {
		q.q.SetPlacer(q.d.placerFor(attr.AV.DstIP)) // place.go
	}
	if mask&(qp.AttrState|qp.AttrDestQPN) == qp.AttrState|qp.AttrDestQPN && attr.State == qp.RTR {
		q.d.settle(q.e, attr.DestQPN) // engines.go
	}
	if err := q.modifyConn(attr, mask, func() error { return q.q.Modify(attr, mask) }); err != nil {
		return err // connreg.go
	}
	return q.revokeGrant() // place_grant.go
}

// PostSend posts a send work request (the QP copies it).
func (q *QP) PostSend(wr SendWR) error {
	return q.q.PostSend(&wr)
}

// PostRecv posts a receive work request (the QP copies it).
func (q *QP) PostRecv(wr RecvWR) error {
	return q.q.PostRecv(&wr)
}

// PostSendAH posts a UD send to the address handle's GID, QPN and Q_Key.
func (q *QP) PostSendAH(wr SendWR, ah *AH) error {
	if ah == nil {
		return errors.New("roce: post send: nil address handle")
	}
	wr.AH = &ah.AV
	wr.RemoteQPN = ah.QPN
	wr.RemoteQKey = ah.QKey
	return q.q.PostSend(&wr)
}

// Destroy moves the queue pair to the error state (outstanding work requests
// complete with WR_FLUSH_ERR) and removes it from the device; frames for its
// QPN are dropped from then on.
func (q *QP) Destroy() error {
	if q.e.dead.Load() {
		return fmt.Errorf("roce: destroy qp %#x: %w", q.e.qpn, qp.ErrDestroyed)
	}
	err := q.q.Modify(&qp.Attr{State: qp.Error}, qp.AttrState)
	q.d.sync() // let the engine flush the outstanding work requests
	if rerr := q.revokeGrant(); err == nil {
		err = rerr // place_grant.go
	}
	q.d.removeQP(q.e)
	if uerr := q.unregisterConn(); err == nil {
		err = uerr // connreg.go
	}
	if derr := q.q.Destroy(); err == nil {
		err = derr
	}
	if err != nil {
		return fmt.Errorf("roce: destroy qp %#x: %w", q.e.qpn, err)
	}
	return nil
}

// An AH is a UD address handle: where a UD send goes.
type AH struct {
	AV   AddressVector
	QPN  uint32
	QKey uint32
}

// CreateAH makes an address handle for the UD queue pair qpn with Q_Key qkey
// at GID dgid, resolving the destination MAC through the device. The source
// GID is chosen as by ResolveAV.
func (d *Device) CreateAH(dgid netip.Addr, qpn, qkey uint32) (*AH, error) {
	av, err := d.ResolveAV(dgid, netip.Addr{})
	if err != nil {
		return nil, err
	}
	return &AH{AV: av, QPN: qpn, QKey: qkey}, nil
}

// ResolveAV builds the address vector to reach dgid from sgid (one of the
// device's GIDs; the zero Addr picks one: for an IPv4 destination the first
// IPv4 GID, for a link-local IPv6 destination GID 0, else the first global
// IPv6 GID). The destination MAC comes from Options.Resolve (the kernel's
// neighbour table under Open), zero when the device has no resolver.
func (d *Device) ResolveAV(dgid, sgid netip.Addr) (AddressVector, error) {
	av, err := d.resolveAV(dgid, sgid, true)
	if err != nil {
		return av, fmt.Errorf("roce: %w", err)
	}
	return av, nil
}

func (d *Device) resolveAV(dgid, sgid netip.Addr, lookupMAC bool) (AddressVector, error) {
	var av AddressVector
	if !dgid.IsValid() {
		return av, errors.New("resolve: invalid destination GID")
	}
	dst := IPFromGID(dgid)
	src := netip.Addr{}
	gids := d.gidTable()
	if sgid.IsValid() {
		sgid = GIDFromIP(IPFromGID(sgid))
		for _, g := range gids {
			if g == sgid {
				src = IPFromGID(g)
			}
		}
		if !src.IsValid() {
			return av, fmt.Errorf("resolve: source GID %v is not in the device's GID table", sgid)
		}
		if src.Is4() != dst.Is4() {
			return av, fmt.Errorf("resolve: source GID %v and destination GID %v are of different IP families", sgid, dgid)
		}
	} else {
		for _, g := range gids {
			a := IPFromGID(g)
			if a.Is4() != dst.Is4() {
				continue
			}
			if a.Is6() && a.IsLinkLocalUnicast() != dst.IsLinkLocalUnicast() {
				continue
			}
			src = a
			break
		}
		if !src.IsValid() {
			return av, fmt.Errorf("resolve: no source GID of the family of %v on the device", dgid)
		}
	}
	av.SrcIP, av.DstIP = src, dst
	av.SrcMAC = d.hw
	av.TTL = 64
	av.SrcPort = d.props.SrcPort
	if mac, ok := groupMAC(dst); ok {
		av.DstMAC = mac // a group's MAC is computed, not resolved (mcast.go)
	} else if d.resolve != nil && lookupMAC {
		mac, err := d.resolve(dst)
		if err != nil {
			return av, fmt.Errorf("resolve %v: %w", dst, err)
		}
		if len(mac) != 6 {
			return av, fmt.Errorf("resolve %v: got %d-byte hardware address", dst, len(mac))
		}
		copy(av.DstMAC[:], mac)
	}
	return av, nil
}

// Endpoint is what one side of an RC connection tells the other.
type Endpoint struct {
	QPN uint32
	PSN uint32     // the first PSN the side sends
	GID netip.Addr // the side's GID
}

// ConnectOptions are the attributes Connect uses. Start from
// DefaultConnectOptions and change what you need; every field is used as
// given except the zero PathMTU (the device's; for OOO queue pairs the largest
// that fits with the OOO headers) and the zero SGID (chosen by ResolveAV).
type ConnectOptions struct {
	SGID            netip.Addr
	PathMTU         MTU
	Access          Access // remote access to this QP's peer requests
	Timeout         uint8  // local ACK timeout exponent: 4.096 µs × 2^Timeout (0: infinite)
	RetryCnt        uint8  // 0..7
	RNRRetry        uint8  // 0..7, 7 = forever
	MinRNRTimer     uint8  // RNR NAK timer code 0..31
	MaxRdAtomic     uint8  // outstanding READ/atomic requests this side sends
	MaxDestRdAtomic uint8  // outstanding READ/atomic requests this side accepts
	TOS             uint8
	DstMAC          net.HardwareAddr // overrides neighbour resolution when set
	// Reliability is how an RC queue pair recovers from loss: GoBackN (the
	// zero value: IBA's, byte for byte as rxe) or SelectiveRepeat, which
	// only a peer that agreed on it understands (an xdproce whose hello
	// offered cm.CapSR; docs/sr-wire.md). RC only; ignored for the others.
	Reliability Reliability
	// SRWindow, with SelectiveRepeat: how many PSNs past a hole the
	// peer's responder holds, from the negotiation (an xdproce says SRHold);
	// it caps the send window. 0: 256, the first SR_SACK format's.
	SRWindow int
	// CC is an RC queue pair's congestion control: CCNone (the zero value)
	// or DCQCN, which only a peer that agreed on it should get (an xdproce
	// whose hello offered cm.CapDCQCN; docs/cc.md): it answers CE-marked
	// frames with CNPs, which rxe does not know. RC only.
	CC CongestionControl
	// NoECT keeps the frames of a DCQCN queue pair not ECN-capable (TOS as
	// given): switches then never mark them, and DCQCN only reacts to the
	// peer's CNPs for frames it marked otherwise.
	NoECT bool
	// BDP, when > 0, caps an RC requester's unacknowledged data near this
	// many bytes: its send window becomes BDP / path MTU PSNs (at least
	// one; a READ counts one per response), below QPConfig.SendWindow.
	// Set it to the path's bandwidth-delay product (link rate × the round
	// trip without queueing, as IRN's BDP-FC): more in flight only fills
	// queues, and with many senders into one port overflows them. 0: no
	// cap but QPConfig.SendWindow. The wire is unchanged.
	BDP int
}

// Reliability is an RC queue pair's loss recovery (ConnectOptions).
type Reliability uint8

// Reliabilities.
const (
	GoBackN         Reliability = iota // resend everything from the lost PSN on (IBA; rxe, every RoCE NIC)
	SelectiveRepeat                    // resend only the PSNs the peer's SR_SACK says are missing (xdproce peers)
)

// String returns "gbn" or "sr", the --reliability values.
func (r Reliability) String() string {
	switch r {
	case GoBackN:
		return "gbn"
	case SelectiveRepeat:
		return "sr"
	}
	return fmt.Sprintf("Reliability(%d)", uint8(r))
}

// ParseReliability parses a --reliability value: "gbn" or "sr".
func ParseReliability(s string) (Reliability, error) {
	switch s {
	case "gbn":
		return GoBackN, nil
	case "sr":
		return SelectiveRepeat, nil
	}
	return 0, fmt.Errorf("roce: reliability %q: want gbn or sr", s)
}

// DefaultConnectOptions: full remote access, timeout 14 (≈ 67 ms), 7
// retries, RNR retry forever, RNR timer 12 (0.64 ms, as rxe's tools), 16
// outstanding READs/atomics each way.
func DefaultConnectOptions() ConnectOptions {
	return ConnectOptions{
		Access:          LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic,
		Timeout:         14,
		RetryCnt:        7,
		RNRRetry:        7,
		MinRNRTimer:     12,
		MaxRdAtomic:     16,
		MaxDestRdAtomic: 16,
	}
}

// Connect takes an RC (or UC) queue pair from RESET through INIT and RTR to
// RTS, connected to remote; localPSN is the first PSN this side sends (tell
// the peer in your Endpoint). o == nil means DefaultConnectOptions.
func (q *QP) Connect(localPSN uint32, remote Endpoint, o *ConnectOptions) error {
	opt := DefaultConnectOptions()
	if o != nil {
		opt = *o
	}
	if opt.PathMTU == 0 {
		opt.PathMTU = q.d.pathMTU(q.typ)
	}
	if opt.DstMAC != nil && len(opt.DstMAC) != 6 {
		return fmt.Errorf("roce: connect qp %#x: DstMAC has %d bytes", q.e.qpn, len(opt.DstMAC))
	}
	av, err := q.d.resolveAV(remote.GID, opt.SGID, opt.DstMAC == nil)
	if err != nil {
		return fmt.Errorf("roce: connect qp %#x: %w", q.e.qpn, err)
	}
	if opt.DstMAC != nil {
		copy(av.DstMAC[:], opt.DstMAC)
	}
	steps := []struct {
		name string
		attr qp.Attr
		mask qp.AttrMask
	}{
		{"INIT", qp.Attr{State: qp.Init, Access: opt.Access}, qp.AttrState | qp.AttrAccessFlags},
		{"RTR", qp.Attr{State: qp.RTR, PathMTU: opt.PathMTU, DestQPN: remote.QPN, RQPSN: remote.PSN,
			MaxDestRdAtomic: opt.MaxDestRdAtomic, MinRNRTimer: opt.MinRNRTimer, AV: av},
			qp.AttrState | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic |
				qp.AttrMinRNRTimer | qp.AttrAV},
		{"RTS", qp.Attr{State: qp.RTS, SQPSN: localPSN, Timeout: opt.Timeout, RetryCnt: opt.RetryCnt,
			RNRRetry: opt.RNRRetry, MaxRdAtomic: opt.MaxRdAtomic},
			qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxRdAtomic},
	}
	if q.typ == qp.UC { // UC has no ACKs, retries or READ/atomic resources
		steps[1].mask &^= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
		steps[2].mask &^= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxRdAtomic
	} else if opt.Reliability == SelectiveRepeat && q.typ == qp.RC {
		steps[1].attr.SelectiveRepeat = true
		steps[1].attr.SRWindow = uint32(min(max(opt.SRWindow, 0), SRHold))
		steps[1].mask |= qp.AttrSelectiveRepeat
		if !q.e.sr.Swap(true) {
			q.d.srQPs.Add(1) // the engine decodes SR_SACK from now on
		}
	} else if opt.Reliability > SelectiveRepeat {
		return fmt.Errorf("roce: connect qp %#x: %v", q.e.qpn, opt.Reliability)
	}
	if opt.BDP < 0 {
		return fmt.Errorf("roce: connect qp %#x: BDP %d", q.e.qpn, opt.BDP)
	}
	if opt.BDP > 0 && q.typ == qp.RC {
		mtu := opt.PathMTU.Bytes()
		steps[2].attr.SendWindow = uint32(max(1, min((opt.BDP+mtu-1)/mtu, 1<<22)))
		steps[2].mask |= qp.AttrSendWindow
	}
	tos, err := ccAttr(q.typ, &opt, &steps[1].attr, &steps[1].mask) // cc.go
	if err != nil {
		return fmt.Errorf("roce: connect qp %#x: %w", q.e.qpn, err)
	}
	steps[1].attr.AV.TOS = tos
	for _, s := range steps {
		if err := q.modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("roce: connect qp %#x to %s: %w", q.e.qpn, s.name, err)
		}
	}
	return nil
}

// Activate takes a UD queue pair from RESET to RTS with the given Q_Key and
// first PSN.
func (q *QP) Activate(qkey, psn uint32) error {
	steps := []struct {
		name string
		attr qp.Attr
		mask qp.AttrMask
	}{
		{"INIT", qp.Attr{State: qp.Init, QKey: qkey}, qp.AttrState | qp.AttrQKey},
		{"RTR", qp.Attr{State: qp.RTR}, qp.AttrState},
		{"RTS", qp.Attr{State: qp.RTS, SQPSN: psn}, qp.AttrState | qp.AttrSQPSN},
	}
	for _, s := range steps {
		if err := q.modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("roce: activate qp %#x to %s: %w", q.e.qpn, s.name, err)
		}
	}
	return nil
}
