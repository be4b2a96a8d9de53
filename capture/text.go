package capture

import (
	"strconv"
)

// String returns r as one line a person can read, for example
//
//	3 10:00:00.000002000 out 192.0.2.12:49441 → 192.0.2.11:4791 RC_SEND_ONLY qpn 0x000011 psn 0xc829ba ackreq payload 64 icrc ok
//	4 10:00:00.000003000 in 192.0.2.11:49441 → 192.0.2.12:4791 RC_ACKNOWLEDGE qpn 0x000011 psn 0xc829ba aeth NAK remote access error msn 1 icrc ok
//
// Times are UTC. Extension headers follow the BTH in wire order: deth, reth,
// atomic, aeth, orig (AtomicAckETH), imm, inv_rkey; an OOO frame shows its
// OOO headers instead of psn and reth, as key=value pairs (see appendOOO:
// "OOO_WRITE qpn 0x000012 ctx=0x000101/k3 tid=7 idx=2 off=512 len=16
// total=528 …"), its payload as len=; then the payload length,
// what a payload describer recognised in brackets, and the ICRC verdict
// ("icrc ok" or "icrc BAD 0x… want 0x…"). A frame that is not RoCE prints its
// Summary; one that does not decode prints "decode error: …".
func (r *Record) String() string { return string(r.AppendText(nil)) }

// AppendText appends the String form of r to b.
func (r *Record) AppendText(b []byte) []byte {
	b = strconv.AppendInt(b, int64(r.Index), 10)
	b = append(b, ' ')
	b = r.Time.UTC().AppendFormat(b, "15:04:05.000000000")
	if r.Dir != "" {
		b = append(b, ' ')
		b = append(b, r.Dir...)
	}
	if r.OrigLen != 0 {
		b = append(b, " (captured "...)
		b = strconv.AppendInt(b, int64(r.Len), 10)
		b = append(b, " of "...)
		b = strconv.AppendInt(b, int64(r.OrigLen), 10)
		b = append(b, " bytes)"...)
	}
	if !r.RoCE {
		b = append(b, ' ')
		b = append(b, r.Summary...)
		return b
	}
	if r.VLAN != nil {
		b = append(b, " vlan "...)
		b = strconv.AppendUint(b, uint64(*r.VLAN&0xFFF), 10)
		if pcp := *r.VLAN >> 13; pcp != 0 {
			b = append(b, " pcp "...)
			b = strconv.AppendUint(b, uint64(pcp), 10)
		}
	}
	b = append(b, ' ')
	b = append(b, r.Src...)
	b = append(b, " → "...)
	b = append(b, r.Dst...)
	if h := r.BTH; h != nil {
		b = append(b, ' ')
		b = append(b, h.Opcode...)
		b = append(b, " qpn "...)
		b = appendHex(b, uint64(h.DestQPN), 6)
		if r.OOO == nil { // an OOO packet's PSN is its index, printed as idx=
			b = append(b, " psn "...)
			b = appendHex(b, uint64(h.PSN), 6)
		}
		if h.AckReq {
			b = append(b, " ackreq"...)
		}
		if h.SE {
			b = append(b, " se"...)
		}
		if h.MigReq {
			b = append(b, " migreq"...)
		}
		if h.FECN {
			b = append(b, " fecn"...)
		}
		if h.BECN {
			b = append(b, " becn"...)
		}
		if h.PKey != 0xFFFF {
			b = append(b, " pkey "...)
			b = appendHex(b, uint64(h.PKey), 4)
		}
	}
	if r.Error != "" && r.ICRC == nil {
		b = append(b, " decode error: "...)
		b = append(b, r.Error...)
		return b
	}
	if d := r.DETH; d != nil {
		b = append(b, " deth qkey "...)
		b = appendHex(b, uint64(d.QKey), 8)
		b = append(b, " srcqp "...)
		b = appendHex(b, uint64(d.SrcQPN), 6)
	}
	if r.OOO != nil {
		b = appendOOO(b, r)
	} else if x := r.RETH; x != nil {
		b = append(b, " reth va "...)
		b = append(b, x.VA...)
		b = append(b, " rkey "...)
		b = appendHex(b, uint64(x.RKey), 8)
		b = append(b, " len "...)
		b = strconv.AppendUint(b, uint64(x.DMALen), 10)
	}
	if a := r.AtomicETH; a != nil {
		b = append(b, " atomic va "...)
		b = append(b, a.VA...)
		b = append(b, " rkey "...)
		b = appendHex(b, uint64(a.RKey), 8)
		if r.BTH != nil && r.BTH.Opcode == "RC_FETCH_ADD" {
			b = append(b, " add "...)
			b = append(b, a.SwapAdd...)
		} else {
			b = append(b, " swap "...)
			b = append(b, a.SwapAdd...)
			b = append(b, " compare "...)
			b = append(b, a.Compare...)
		}
	}
	if a := r.AETH; a != nil {
		b = append(b, " aeth "...)
		if a.Type == "RNR_NAK" {
			b = append(b, "RNR"...) // "RNR timer 0.64ms"
		} else {
			b = append(b, a.Type...) // "ACK credits unlimited", "NAK remote access error"
		}
		b = append(b, ' ')
		b = append(b, a.Meaning...)
		b = append(b, " msn "...)
		b = strconv.AppendUint(b, uint64(a.MSN), 10)
	}
	if r.SACK != nil {
		b = appendSACK(b, r.SACK)
	}
	if a := r.AtomicAck; a != nil {
		b = append(b, " orig "...)
		b = append(b, a.Orig...)
	}
	if r.ImmDt != nil {
		b = append(b, " imm "...)
		b = appendHex(b, uint64(*r.ImmDt), 8)
	}
	if r.IETH != nil {
		b = append(b, " inv_rkey "...)
		b = appendHex(b, uint64(*r.IETH), 8)
	}
	if r.OOO == nil && r.SACK == nil && (r.PayloadLen > 0 || r.AETH == nil && r.AtomicETH == nil && r.RETH == nil) {
		b = append(b, " payload "...)
		b = strconv.AppendInt(b, int64(r.PayloadLen), 10)
	}
	if r.Payload != "" {
		b = append(b, " ["...)
		b = append(b, r.Payload...)
		b = append(b, ']')
	}
	if r.Error != "" {
		b = append(b, " error: "...)
		b = append(b, r.Error...)
	}
	if c := r.ICRC; c != nil {
		if c.OK {
			b = append(b, " icrc ok"...)
		} else {
			b = append(b, " icrc BAD "...)
			b = appendHex(b, uint64(c.Value), 8)
			b = append(b, " want "...)
			b = appendHex(b, uint64(c.Want), 8)
		}
	}
	return b
}

// appendHex appends v as 0x followed by at least digits hex digits.
func appendHex(b []byte, v uint64, digits int) []byte {
	b = append(b, '0', 'x')
	s := strconv.FormatUint(v, 16)
	for i := len(s); i < digits; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}
