package rdmacm

import (
	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/wire"
)

// DescribePacket recognises CM MADs in a decoded RoCE packet: a UD SEND to
// QP1 whose 256-byte payload is a MAD of class CM. It returns "CM " and the
// message's String ("CM REQ comm_id=0x82efb25e service_id=0x0000000001061c06
// qpn=0x1e psn=0x268ac8 …"), or "CM malformed: …" with the decode error for
// a CM MAD that does not decode. The package registers it with capture
// (name "rdmacm") so that `xdproce dump` names CM messages.
func DescribePacket(p *wire.Packet) (string, bool) {
	if p.BTH.Opcode != wire.UDSendOnly || p.BTH.DestQPN != 1 || len(p.Payload) < 2 || p.Payload[1] != ClassCM {
		return "", false
	}
	h, m, err := Decode(p.Payload)
	if err != nil {
		return "CM malformed: " + err.Error(), true
	}
	return "CM " + m.String() + " tid=" + hex64(h.TID), true
}

func init() { capture.RegisterPayloadDescriber("rdmacm", DescribePacket) }
