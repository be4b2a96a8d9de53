package rdmacm

import "strconv"

// REQ private data: 92 bytes at REQ byte 140 (IBA Vol 1, 12.6.5).
const REQPrivateDataLen = 92

// TransportService is REQ's transport service type (2 bits).
type TransportService uint8

// Transport service types.
const (
	TransportRC  TransportService = 0
	TransportUC  TransportService = 1
	TransportRD  TransportService = 2
	TransportXRC TransportService = 3 // with ExtendedTransport 1
)

// REQ, request for communication (IBA Vol 1, 12.6.5, table 106), the active
// side's first message. Byte offsets from the start of the message (MAD byte
// 24), bit 0 the most significant:
//
//	  0 LocalCommID                 5 VendorID (24, ECE)
//	  8 ServiceID (64)             16 LocalCAGUID (64)
//	 28 LocalQKey                  32 LocalQPN (24) | 35 ResponderResources
//	 36 LocalEECN (24) | 39 InitiatorDepth
//	 40 RemoteEECN (24) | 43 RemoteCMResponseTimeout (5), TransportService (2), E2E flow control (1)
//	 44 StartingPSN (24) | 47 LocalCMResponseTimeout (5), RetryCount (3)
//	 48 PKey | 50 PathMTU (4), RDCExists (1), RNRRetryCount (3)
//	         | 51 MaxCMRetries (4), SRQ (1), ExtendedTransport (3)
//	 52 primary Path (44 bytes)    96 alternate Path (44; 139 bit 5: SAP supported)
//	140 private data (92)
type REQ struct {
	LocalCommID uint32
	VendorID    uint32 // 24 bits
	ServiceID   uint64
	LocalCAGUID uint64
	LocalQKey   uint32
	LocalQPN    uint32 // 24 bits
	// ResponderResources is how many RDMA READ/atomic requests the sender
	// accepts at once; InitiatorDepth how many it issues.
	ResponderResources uint8
	LocalEECN          uint32 // 24 bits
	InitiatorDepth     uint8
	RemoteEECN         uint32 // 24 bits
	// RemoteCMResponseTimeout and LocalCMResponseTimeout (5 bits each,
	// 4.096 µs · 2^n, see Timeout): how long the remote may take to answer
	// this REQ, and how long the sender takes to answer a message.
	RemoteCMResponseTimeout uint8
	TransportService        TransportService // 2 bits
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8
	RetryCount              uint8 // 3 bits: transport retries
	PKey                    uint16
	PathMTU                 uint8 // 4 bits, IB MTU enum (3 = 1024)
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits (7 = infinite)
	MaxCMRetries            uint8 // 4 bits: how often the sender resends a CM message
	SRQ                     bool
	ExtendedTransport       uint8 // 3 bits
	Primary, Alternate      Path
	SAPSupported            bool
	PrivateData             [REQPrivateDataLen]byte
}

// AttrID returns AttrREQ.
func (*REQ) AttrID() AttrID { return AttrREQ }

func (m *REQ) decode(d *[DataLen]byte) error {
	m.LocalCommID = be32(d[0:])
	m.VendorID = u24(d[5:])
	m.ServiceID = be64(d[8:])
	m.LocalCAGUID = be64(d[16:])
	m.LocalQKey = be32(d[28:])
	m.LocalQPN, m.ResponderResources = u24(d[32:]), d[35]
	m.LocalEECN, m.InitiatorDepth = u24(d[36:]), d[39]
	m.RemoteEECN = u24(d[40:])
	m.RemoteCMResponseTimeout = field(d[43], 0, 5)
	m.TransportService = TransportService(field(d[43], 5, 2))
	m.EndToEndFlowControl = flagBit(d[43], 7)
	m.StartingPSN = u24(d[44:])
	m.LocalCMResponseTimeout, m.RetryCount = field(d[47], 0, 5), field(d[47], 5, 3)
	m.PKey = be16(d[48:])
	m.PathMTU, m.RDCExists, m.RNRRetryCount = field(d[50], 0, 4), flagBit(d[50], 4), field(d[50], 5, 3)
	m.MaxCMRetries, m.SRQ, m.ExtendedTransport = field(d[51], 0, 4), flagBit(d[51], 4), field(d[51], 5, 3)
	m.Primary.decode(d[52:96])
	m.Alternate.decode(d[96:140])
	m.SAPSupported = flagBit(d[139], 5)
	copy(m.PrivateData[:], d[140:])
	return nil
}

func (m *REQ) encode(d *[DataLen]byte) error {
	var c rangeCheck
	c.max("vendor ID", uint64(m.VendorID), max24)
	c.max("local QPN", uint64(m.LocalQPN), max24)
	c.max("local EECN", uint64(m.LocalEECN), max24)
	c.max("remote EECN", uint64(m.RemoteEECN), max24)
	c.max("remote CM response timeout", uint64(m.RemoteCMResponseTimeout), max5)
	c.max("transport service", uint64(m.TransportService), max2)
	c.max("starting PSN", uint64(m.StartingPSN), max24)
	c.max("local CM response timeout", uint64(m.LocalCMResponseTimeout), max5)
	c.max("retry count", uint64(m.RetryCount), max3)
	c.max("path MTU", uint64(m.PathMTU), max4)
	c.max("RNR retry count", uint64(m.RNRRetryCount), max3)
	c.max("max CM retries", uint64(m.MaxCMRetries), max4)
	c.max("extended transport", uint64(m.ExtendedTransport), max3)
	m.Primary.check(&c, false)
	m.Alternate.check(&c, true)
	if err := c.err("encode req"); err != nil {
		return err
	}
	put32(d[0:], m.LocalCommID)
	put24(d[5:], m.VendorID)
	put64(d[8:], m.ServiceID)
	put64(d[16:], m.LocalCAGUID)
	put32(d[28:], m.LocalQKey)
	put24(d[32:], m.LocalQPN)
	d[35] = m.ResponderResources
	put24(d[36:], m.LocalEECN)
	d[39] = m.InitiatorDepth
	put24(d[40:], m.RemoteEECN)
	setField(&d[43], 0, 5, m.RemoteCMResponseTimeout)
	setField(&d[43], 5, 2, uint8(m.TransportService))
	setFlag(&d[43], 7, m.EndToEndFlowControl)
	put24(d[44:], m.StartingPSN)
	setField(&d[47], 0, 5, m.LocalCMResponseTimeout)
	setField(&d[47], 5, 3, m.RetryCount)
	put16(d[48:], m.PKey)
	setField(&d[50], 0, 4, m.PathMTU)
	setFlag(&d[50], 4, m.RDCExists)
	setField(&d[50], 5, 3, m.RNRRetryCount)
	setField(&d[51], 0, 4, m.MaxCMRetries)
	setFlag(&d[51], 4, m.SRQ)
	setField(&d[51], 5, 3, m.ExtendedTransport)
	m.Primary.encode(d[52:96])
	m.Alternate.encode(d[96:140])
	setFlag(&d[139], 5, m.SAPSupported)
	copy(d[140:], m.PrivateData[:])
	return nil
}

// String summarises the REQ: "REQ comm_id=0x82efb25e service_id=0x0000000001061c06 qpn=0x1e psn=0x268ac8",
// then the IP CM header's addresses when the private data starts with one.
func (m *REQ) String() string {
	s := "REQ comm_id=" + hex32(m.LocalCommID) + " service_id=" + hex64(m.ServiceID) +
		" qpn=" + hex(m.LocalQPN) + " psn=" + hex(m.StartingPSN) + " mtu=" + strconv.Itoa(int(m.PathMTU))
	return s + ipSummary(m.ServiceID, m.PrivateData[:])
}
