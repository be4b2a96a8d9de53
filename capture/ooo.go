package capture

import (
	"net/netip"
	"strconv"

	"github.com/xdproce/xdproce/roce/wire"
)

// OOORecord holds the OOO headers of a frame with an OOO opcode
// (docs/ooo-wire.md): OOO_WRITE, OOO_READ_REQ, OOO_COMPLETION,
// OOO_3P_READ_REQ, OOO_3P_WRITE, and half-RDMA/half-FIFO's OOO_FIFO_SEND,
// OOO_READ_REQ_TO_FIFO, OOO_READ_REQ_FROM_FIFO. The RETH of those frames is in Record.RETH
// as found; for data packets Index, Offset and Len say where the packet's
// bytes lie in the operation.
type OOORecord struct {
	Ctx         string  `json:"ctx"` // "0x000101/k3": 24-bit context id / key
	CtxID       uint32  `json:"ctx_id"`
	CtxKey      uint8   `json:"ctx_key"`
	TID         uint32  `json:"tid"`
	Total       uint32  `json:"total"`
	Initiator   string  `json:"initiator"` // the initiator's context, same form as Ctx
	InitiatorID uint32  `json:"initiator_id"`
	Notify      string  `json:"notify"`           // "none", "initiator", "target", "both", "+self"
	Seg         int     `json:"seg,omitempty"`    // segment size in bytes (0: none given)
	Tag         uint32  `json:"tag"`              // the initiator's tag
	Index       *uint32 `json:"index,omitempty"`  // data packets: BTH.PSN, the packet's index
	Offset      *uint64 `json:"offset,omitempty"` // data packets: Index × Seg
	Len         *uint32 `json:"len,omitempty"`    // data packets: bytes in this packet
	// Sink is the XRR of READ requests: where the response goes.
	SinkVA   string  `json:"sink_va,omitempty"`
	SinkRKey *uint32 `json:"sink_rkey,omitempty"`
	// Status is the XCS status of OOO_COMPLETION: "ok" or "0x.." (reserved).
	Status     string     `json:"status,omitempty"`
	Target     *XTPRecord `json:"target,omitempty"`     // third party: the data sink
	Controller *XTPRecord `json:"controller,omitempty"` // third party: who gets the completion
}

// XTPRecord is one node of a third-party OOO operation.
type XTPRecord struct {
	GID string `json:"gid"` // as an IP address: "198.51.100.3" for ::ffff:198.51.100.3
	QPN uint32 `json:"qpn"`
	Ctx string `json:"ctx"`
}

func describeOOO(p *wire.Packet, h wire.Headers) *OOORecord {
	x := &p.XRH
	o := &OOORecord{
		Ctx: x.Ctx.String(), CtxID: x.Ctx.ID(), CtxKey: x.Ctx.Key(), TID: x.TID, Total: x.Total,
		Initiator: x.Initiator.String(), InitiatorID: x.Initiator.ID(), Notify: x.Notify.String(), Seg: x.Seg.Bytes(), Tag: x.Tag,
	}
	if info, _ := p.BTH.Opcode.Info(); info.Payload { // a data packet
		idx, off, n := p.BTH.PSN, x.Offset(p.BTH.PSN), uint32(len(p.Payload))
		o.Index, o.Offset, o.Len = &idx, &off, &n
	}
	if h&wire.HasXRR != 0 {
		rkey := p.XRR.RKey
		o.SinkVA, o.SinkRKey = hex64(p.XRR.VA), &rkey
	}
	if h&wire.HasXCS != 0 {
		o.Status = "ok"
		if p.XCS.Status != wire.XCSSuccess {
			o.Status = string(appendHex(nil, uint64(p.XCS.Status), 2))
		}
	}
	if h&wire.HasXTPTarget != 0 {
		o.Target = describeXTP(&p.XTPTarget)
	}
	if h&wire.HasXTPController != 0 {
		o.Controller = describeXTP(&p.XTPController)
	}
	return o
}

func describeXTP(x *wire.XTP) *XTPRecord {
	return &XTPRecord{GID: netip.AddrFrom16(x.GID).Unmap().String(), QPN: x.QPN, Ctx: x.Ctx.String()}
}

// appendOOO appends the text form of o, after the opcode and QPN:
//
//	ctx=0x000101/k3 tid=7 idx=2 off=512 len=16 total=528 va=0x… rkey=0x… from=0x000202/k5 notify=initiator tag=0x…
//
// with sink=VA/RKEY for READ requests, status= for completions and
// target= / controller= (GID/QPN/ctx) for third-party operations.
func appendOOO(b []byte, r *Record) []byte {
	o := r.OOO
	b = append(b, " ctx="...)
	b = append(b, o.Ctx...)
	b = append(b, " tid="...)
	b = strconv.AppendUint(b, uint64(o.TID), 10)
	if o.Index != nil {
		b = append(b, " idx="...)
		b = strconv.AppendUint(b, uint64(*o.Index), 10)
		b = append(b, " off="...)
		b = strconv.AppendUint(b, *o.Offset, 10)
		b = append(b, " len="...)
		b = strconv.AppendUint(b, uint64(*o.Len), 10)
	}
	b = append(b, " total="...)
	b = strconv.AppendUint(b, uint64(o.Total), 10)
	if o.Status != "" {
		b = append(b, " status="...)
		b = append(b, o.Status...)
	}
	if o.Index == nil && o.Seg != 0 {
		b = append(b, " seg="...)
		b = strconv.AppendInt(b, int64(o.Seg), 10)
	}
	if x := r.RETH; x != nil {
		b = append(b, " va="...)
		b = append(b, x.VA...)
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(x.RKey), 8)
	}
	if o.SinkRKey != nil {
		b = append(b, " sink="...)
		b = append(b, o.SinkVA...)
		b = append(b, '/')
		b = appendHex(b, uint64(*o.SinkRKey), 8)
	}
	for _, t := range []struct {
		name string
		x    *XTPRecord
	}{{" target=", o.Target}, {" controller=", o.Controller}} {
		if t.x != nil {
			b = append(b, t.name...)
			b = append(b, t.x.GID...)
			b = append(b, "/qpn="...)
			b = appendHex(b, uint64(t.x.QPN), 6)
			b = append(b, "/ctx="...)
			b = append(b, t.x.Ctx...)
		}
	}
	b = append(b, " from="...)
	b = append(b, o.Initiator...)
	b = append(b, " notify="...)
	b = append(b, o.Notify...)
	b = append(b, " tag="...)
	return appendHex(b, uint64(o.Tag), 8)
}
