package wire

// IETH is the Invalidate Extended Transport Header (IBA Vol 1, 9.3.8): 4
// bytes carried by SEND_LAST_WITH_INVALIDATE and SEND_ONLY_WITH_INVALIDATE,
// the R_Key the responder invalidates. Packet keeps it as a plain uint32
// (Packet.IETH).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             R_Key                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IETH uint32
