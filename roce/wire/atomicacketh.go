package wire

import "encoding/binary"

// AtomicAckETH is the Atomic Acknowledge Extended Transport Header (IBA Vol 1,
// 9.3.6), 8 bytes after the AETH of an ATOMIC_ACKNOWLEDGE: the value the
// target held before the atomic operation.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Original Remote Data (63..0)                  |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AtomicAckETH struct {
	Orig uint64
}

func (h *AtomicAckETH) decode(b []byte) { h.Orig = binary.BigEndian.Uint64(b[:AtomicAckETHLen]) }

func (h *AtomicAckETH) encode(b []byte) { binary.BigEndian.PutUint64(b[:AtomicAckETHLen], h.Orig) }
