// Package rdmacm is the protocol layer of the RDMA connection manager: the
// communication-management MADs (IBA Vol 1, chapter 12) that rdma_cm users —
// rping, perftest -R, ucmatose, udaddy, NVMe-oF — exchange on QP1 to set up
// RC and UD queue pairs, and librdmacm's IP CM header inside their private
// data.
//
// It is a pure codec: it knows nothing of queue pairs, timers or devices, so
// it does not import roce/qp. roce's CM agent (QP1, roce/cm_agent.go) hands
// it the 256-byte payload of each UD SEND to QP1 (Q_Key wire.GSIQKey) and
// sends what it encodes; the connection state machine, retries and the
// rdma_cm-shaped Go API (Device.ListenCM, Device.DialCM) live in roce. The
// MAD header lives here rather than in a roce/mad
// package of its own because on RoCE the CM is the only management class a
// QP1 serves (there is no subnet manager, SA or SMP); should another class
// appear, Header moves out unchanged.
//
// Messages: REQ, MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR, SIDRReq and
// SIDRRep, each a struct with every field of its IBA table at its bit
// position, private data as a fixed-size array of the message's length
// (REQ 92, MRA 222, REJ 148, REP 196, RTU 224, DREQ 220, DREP 224, LAP 168,
// APR 148, SIDR_REQ 216, SIDR_REP 136 bytes). Decode returns a new message
// of the type the attribute ID names; DecodeInto fills one the caller keeps
// and allocates nothing; Encode writes header and message into 256 bytes
// and allocates nothing unless a field is out of range. Reserved bits are
// ignored on decode and written as zero, as Linux does; decode → encode
// gives back the original bytes whenever those were zero (every rxe MAD).
//
// Validation follows what Linux's MAD layer and CM check before a message
// is acted on: exactly 256 bytes, base version 1, class CM (ErrNotCM
// otherwise, so a QP1 dispatcher can tell another class from a broken CM
// MAD), class version 2, method SEND, a known attribute, and length fields
// (REJ's rejected info length, APR's and SIDR_REP's additional info length)
// within their 72-byte areas. Field values (transport type, MTU, timeouts)
// are the state machine's to judge and answer with a REJ (RejectReason).
// Malformed input returns an *Error matching one sentinel; nothing panics.
//
// rdma_cm's IP addressing: ServiceID(PSTCP, port) is 0x0000000001060000 |
// port, ServiceID(PSUDP, port) 0x0000000001110000 | port; ParseIPHeader
// and IPHeader.Put read and write the 36-byte header (IP version, source
// port, source and destination addresses, IPv4 or IPv6) that librdmacm puts
// at the start of REQ and SIDR_REQ private data, leaving 56 bytes of user
// data in a REQ. The private data is not authenticated, as with the stock
// tools.
//
// Importing the package registers DescribePacket with capture, so `xdproce
// dump` prints "CM REQ comm_id=… service_id=… qpn=… psn=…".
package rdmacm
