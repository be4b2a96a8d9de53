package rdmacm

import "strconv"

// REJ sizes (IBA Vol 1, 12.6.7): additional rejection information (ARI) of
// up to 72 bytes at byte 12, private data of 148 bytes at byte 84.
const (
	ARILen            = 72
	REJPrivateDataLen = 148
)

// MsgKind says which message a REJ rejects or an MRA acknowledges (2 bits).
type MsgKind uint8

// Message kinds of REJ's MessageRejected and MRA's MessageMRAed.
const (
	MsgREQ   MsgKind = 0
	MsgREP   MsgKind = 1
	MsgOther MsgKind = 2 // REJ: any other (LAP for MRA)
)

var msgKindNames = [...]string{"REQ", "REP", "other", "reserved(3)"}

func (k MsgKind) String() string {
	if int(k) < len(msgKindNames) {
		return msgKindNames[k]
	}
	return "MsgKind(" + strconv.Itoa(int(k)) + ")"
}

// RejectReason is REJ's reason code (IBA Vol 1, 12.6.7.2, table 109; Linux
// enum ib_cm_rej_reason).
type RejectReason uint16

// Reject reasons.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4 // ARI: the sender's CA GUID
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8 // no listener: what Linux sends
	RejInvalidTransportType      RejectReason = 9
	RejStaleConnection           RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28 // rdma_reject: the application said no
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35 // ECE
)

var rejectNames = [...]string{
	RejNoQP: "no QP", RejNoEEC: "no EEC", RejNoResources: "no resources", RejTimeout: "timeout",
	RejUnsupported: "unsupported", RejInvalidCommID: "invalid comm ID",
	RejInvalidCommInstance: "invalid comm instance", RejInvalidServiceID: "invalid service ID",
	RejInvalidTransportType: "invalid transport type", RejStaleConnection: "stale connection",
	RejRDCNotExist: "RDC does not exist", RejInvalidGID: "invalid GID", RejInvalidLID: "invalid LID",
	RejInvalidSL: "invalid SL", RejInvalidTrafficClass: "invalid traffic class",
	RejInvalidHopLimit: "invalid hop limit", RejInvalidPacketRate: "invalid packet rate",
	RejInvalidAltGID: "invalid alternate GID", RejInvalidAltLID: "invalid alternate LID",
	RejInvalidAltSL: "invalid alternate SL", RejInvalidAltTrafficClass: "invalid alternate traffic class",
	RejInvalidAltHopLimit: "invalid alternate hop limit", RejInvalidAltPacketRate: "invalid alternate packet rate",
	RejPortCMRedirect: "port and CM redirect", RejPortRedirect: "port redirect", RejInvalidMTU: "invalid MTU",
	RejInsufficientRespResources: "insufficient responder resources", RejConsumerDefined: "consumer defined",
	RejInvalidRNRRetry: "invalid RNR retry", RejDuplicateLocalCommID: "duplicate local comm ID",
	RejInvalidClassVersion: "invalid class version", RejInvalidFlowLabel: "invalid flow label",
	RejInvalidAltFlowLabel: "invalid alternate flow label", RejVendorOptionNotSupported: "vendor option not supported",
}

// String returns the reason in words ("invalid service ID") or "reason N".
func (r RejectReason) String() string {
	if int(r) < len(rejectNames) && rejectNames[r] != "" {
		return rejectNames[r]
	}
	return "reason " + strconv.Itoa(int(r))
}

// REJ, reject (IBA Vol 1, 12.6.7, table 108). Byte offsets from the start
// of the message, bit 0 the most significant:
//
//	 0 LocalCommID   4 RemoteCommID (0 when rejecting a REQ)
//	 8 MessageRejected (2)   9 RejectedInfoLength (7)   10 Reason (16)
//	12 ARI (72)     84 private data (148)
type REJ struct {
	LocalCommID     uint32
	RemoteCommID    uint32
	MessageRejected MsgKind // 2 bits
	// ARILength is how many bytes of ARI count (7 bits, at most ARILen;
	// decode refuses more).
	ARILength   uint8
	Reason      RejectReason
	ARI         [ARILen]byte
	PrivateData [REJPrivateDataLen]byte
}

// AttrID returns AttrREJ.
func (*REJ) AttrID() AttrID { return AttrREJ }

func (m *REJ) decode(d *[DataLen]byte) error {
	m.LocalCommID, m.RemoteCommID = be32(d[0:]), be32(d[4:])
	m.MessageRejected, m.ARILength = MsgKind(field(d[8], 0, 2)), field(d[9], 0, 7)
	m.Reason = RejectReason(be16(d[10:]))
	copy(m.ARI[:], d[12:84])
	copy(m.PrivateData[:], d[84:])
	if m.ARILength > ARILen {
		return errREJInfoLen
	}
	return nil
}

func (m *REJ) encode(d *[DataLen]byte) error {
	var c rangeCheck
	c.max("message rejected", uint64(m.MessageRejected), max2)
	c.max("rejected info length", uint64(m.ARILength), ARILen)
	if err := c.err("encode rej"); err != nil {
		return err
	}
	put32(d[0:], m.LocalCommID)
	put32(d[4:], m.RemoteCommID)
	setField(&d[8], 0, 2, uint8(m.MessageRejected))
	setField(&d[9], 0, 7, m.ARILength)
	put16(d[10:], uint16(m.Reason))
	copy(d[12:84], m.ARI[:])
	copy(d[84:], m.PrivateData[:])
	return nil
}

// String summarises the REJ: "REJ comm_id=… remote_comm_id=… rejected=REQ reason=8 (invalid service ID)".
func (m *REJ) String() string {
	return "REJ comm_id=" + hex32(m.LocalCommID) + " remote_comm_id=" + hex32(m.RemoteCommID) +
		" rejected=" + m.MessageRejected.String() + " reason=" + strconv.Itoa(int(m.Reason)) + " (" + m.Reason.String() + ")"
}
