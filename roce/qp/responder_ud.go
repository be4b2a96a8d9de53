package qp

import (
	"encoding/binary"

	"github.com/xdproce/xdproce/roce/wire"
)

// The UD responder: a datagram SEND lands whole in one receive WQE behind
// the 40-byte GRH area, or is dropped.

// respUD receives a UD SEND: Q_Key check, then the
// 40-byte GRH area and the payload into the next receive WQE.
func (q *QP) respUD(k *respPkt) respState {
	p := k.p
	if k.info.Kind != wire.KindSend || p.DETH.QKey != q.e.attr.QKey {
		return respDrop // Q_Key violation: silently dropped (IBA 9.6)
	}
	if q.recvEmpty() {
		return respDrop // UD has no RNR: the datagram is lost
	}
	rqe := q.recvHead()
	var grh [GRHLen]byte
	buildGRH(&grh, p)
	n := uint64(len(p.Payload))
	if GRHLen+n > rqe.length {
		q.completeRecv(WCLocLenErr)
		return respDone
	}
	if st := q.sglCopy(rqe.sgl(), 0, grh[:], true); st != WCSuccess {
		q.completeRecv(st)
		return respDone
	}
	if st := q.sglCopy(rqe.sgl(), GRHLen, p.Payload, true); st != WCSuccess {
		q.completeRecv(st)
		return respDone
	}
	wc := WC{ID: rqe.id, Opcode: WCRecv, ByteLen: uint32(GRHLen + n), GRH: true, QPN: q.qpn, SrcQPN: p.DETH.SrcQPN}
	if k.info.Headers&wire.HasImmDt != 0 {
		wc.ImmData, wc.WithImm = p.ImmDt, true
	}
	q.pushRecv(&wc)
	return respDone
}

// buildGRH writes the GRH area of a UD receive buffer as rxe does: for IPv6
// the IPv6 header; for IPv4, 20 zero bytes then the IPv4 header.
func buildGRH(g *[GRHLen]byte, p *wire.Packet) {
	l2 := 14
	if p.HasVLAN {
		l2 += 4
	}
	if p.IPv6 {
		h := g[:]
		binary.BigEndian.PutUint32(h, 6<<28|uint32(p.TOS)<<20|p.FlowLabel)
		binary.BigEndian.PutUint16(h[4:], uint16(p.FrameLen()-l2-40))
		h[6] = 17
		h[7] = p.TTL
		s, d := p.SrcIP.As16(), p.DstIP.As16()
		copy(h[8:24], s[:])
		copy(h[24:40], d[:])
		return
	}
	*g = [GRHLen]byte{}
	h := g[20:]
	h[0] = 0x45
	h[1] = p.TOS
	binary.BigEndian.PutUint16(h[2:], uint16(p.FrameLen()-l2))
	binary.BigEndian.PutUint16(h[4:], p.IPID)
	h[6] = p.IPFlags << 5
	h[8] = p.TTL
	h[9] = 17
	s, d := p.SrcIP.As4(), p.DstIP.As4()
	copy(h[12:16], s[:])
	copy(h[16:20], d[:])
	binary.BigEndian.PutUint16(h[10:], wire.IPv4Checksum(h))
}
