package wire

import "encoding/binary"

// ImmDt is the Immediate Data Extended Transport Header (IBA Vol 1, 9.3.7):
// 4 bytes carried by the *_WITH_IMMEDIATE opcodes, after every other
// extension header. Packet keeps it as a plain uint32 (Packet.ImmDt), in
// host order; on the wire it is big-endian, as ibverbs' network-order
// imm_data is.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Immediate Data                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type ImmDt uint32

func decodeU32(b []byte) uint32    { return binary.BigEndian.Uint32(b[:4]) }
func encodeU32(b []byte, v uint32) { binary.BigEndian.PutUint32(b[:4], v) }
