package enlarge

import (
	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/wire"
)

// DescribePacket is DescribeControl for a decoded RoCE packet: it recognises
// the enlargement layer's control messages, which travel as
// RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE whose immediate data names a control kind and
// whose payload starts with Magic. The package registers it with capture
// (name "enlarge") so that a program importing enlarge (xdproce dump) prints
// ENLARGE_REQ, ENLARGE_ACK and ENLARGE_CREDIT with their fields.
func DescribePacket(p *wire.Packet) (string, bool) {
	if p.BTH.Opcode != wire.RCWriteOnlyImm {
		return "", false
	}
	switch p.ImmDt >> immKindShift {
	case immReq, immAck, immCredit:
		return DescribeControl(p.Payload)
	}
	return "", false
}

func init() { capture.RegisterPayloadDescriber("enlarge", DescribePacket) }
