package wire

// UDP source ports: RoCEv2 uses the source port for ECMP entropy (RoCEv2
// annex A17). Receivers accept any source port.

// SourcePortMin is the lowest source port of a flow (0xC000); every port
// below comes from the 14-bit flow hash ORed into it.
const SourcePortMin = 0xC000

// FlowLabel returns the 20-bit flow label Linux derives from a pair of QPNs
// (rdma_calc_flow_label). It is symmetric in the QPNs.
func FlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// SourcePortFromFlowLabel folds a 20-bit flow label into a source port
// (Linux rdma_flow_label_to_udp_sport): the low 14 bits XOR the high 6, ORed
// with 0xC000.
func SourcePortFromFlowLabel(fl uint32) uint16 {
	fl &= 0xFFFFF
	return uint16((fl&0x3FFF)^(fl>>14)) | SourcePortMin
}

// SourcePort returns the source port rxe uses for an RC/UC QP pair set up
// without RDMA CM: QPN 0x11 <-> 0x11 gives 49441.
func SourcePort(lqpn, rqpn uint32) uint16 {
	return SourcePortFromFlowLabel(FlowLabel(lqpn, rqpn))
}

// CMFlowLabel returns the flow label RDMA CM derives from the ports of its
// connection (rdma-cm sets it in the path record).
func CMFlowLabel(cmSport, cmDport uint16) uint32 {
	return (uint32(cmSport)*31 + uint32(cmDport)) & 0xFFFFF
}

// UDSourcePort returns the source port rxe uses for a UD QP (and QP1):
// 0xC000 + hash_32(qpn, 14), with Linux's hash_32(v, bits) =
// (v * 0x61C88647) >> (32 - bits). QP1 gives 55410.
func UDSourcePort(qpn uint32) uint16 {
	return SourcePortMin + uint16((qpn*0x61C88647)>>(32-14))
}
