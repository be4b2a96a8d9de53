package wire

import "encoding/binary"

// DETH is the Datagram Extended Transport Header (IBA Vol 1, 9.3.2), 8 bytes,
// carried by every UD packet, right after the BTH:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             Q_Key                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |            Source QP (24 bits)                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type DETH struct {
	QKey   uint32
	Resv   uint8
	SrcQPN uint32 // 24 bits
}

// GSIQKey is the well-known Q_Key of QP1, the General Services Interface
// (IBA Vol 1, chapter 13; the RDMA-CM MADs in the captures carry it).
const GSIQKey = 0x80010000

func (h *DETH) decode(b []byte) {
	_ = b[DETHLen-1]
	h.QKey = binary.BigEndian.Uint32(b)
	h.Resv = b[4]
	h.SrcQPN = binary.BigEndian.Uint32(b[4:]) & PSNMask
}

func (h *DETH) encode(b []byte) {
	_ = b[DETHLen-1]
	binary.BigEndian.PutUint32(b, h.QKey)
	binary.BigEndian.PutUint32(b[4:], h.SrcQPN&PSNMask)
	b[4] = h.Resv
}
