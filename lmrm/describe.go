package lmrm

import (
	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/wire"
)

// Describe names the control message in payload, if it is one.
func Describe(payload []byte) (string, bool) {
	var m Msg
	if len(payload) < 4 || string(payload[:4]) != Magic {
		return "", false
	}
	if err := Decode(payload, &m); err != nil {
		return "LMRM (" + err.Error() + ")", true
	}
	return m.String(), true
}

// DescribePacket is Describe for a decoded RoCE packet: an RC SEND ONLY
// whose payload starts with Magic. The package registers it with capture
// (name "lmrm") so that a program importing lmrm (xdproce dump) prints
// LMRM_ALLOC, LMRM_ALLOC_ACK, LMRM_RELEASE and LMRM_REVOKE with their fields.
func DescribePacket(p *wire.Packet) (string, bool) {
	if p.BTH.Opcode != wire.RCSendOnly {
		return "", false
	}
	return Describe(p.Payload)
}

func init() { capture.RegisterPayloadDescriber("lmrm", DescribePacket) }
