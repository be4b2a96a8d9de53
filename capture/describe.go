package capture

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/xdproce/xdproce/roce/wire"
)

// SchemaVersion is the version of Record's JSON form. Field names and
// meanings of a version never change; a new version is a new number.
const SchemaVersion = 1

// Record describes one captured frame: what `xdproce dump` prints, as one
// line of text (String) or as JSON (encoding/json on the struct; field names
// are stable within SchemaVersion). 64-bit values (addresses, atomic
// operands) are JSON strings "0x…" so that no JSON reader rounds them; other
// numbers are JSON numbers.
type Record struct {
	Index int       `json:"index"`         // frame number in the file, from 1
	Time  time.Time `json:"time"`          // capture timestamp
	Dir   string    `json:"dir,omitempty"` // "in" or "out" when the capture says
	Len   int       `json:"len"`           // captured bytes
	// OrigLen is the frame's length on the wire when the capture kept only
	// part of it (snapshot length); 0 when the whole frame was captured. A
	// cut RoCE frame cannot be checked: it does not decode and counts as bad.
	OrigLen int `json:"orig_len,omitempty"`

	// RoCE is true for frames sent to UDP port 4791; the fields below are
	// then filled in as far as the frame decodes.
	RoCE bool `json:"roce"`
	// Summary describes a frame that is not RoCEv2: "non-RoCE IPv4 TCP
	// 192.0.2.1:22 → 192.0.2.2:50000", "non-RoCE ARP".
	Summary string `json:"summary,omitempty"`
	// Error says why a RoCE frame does not decode (or has a bad IPv4 header
	// checksum); empty when it decodes.
	Error string `json:"error,omitempty"`

	VLAN      *uint16 `json:"vlan_tci,omitempty"`
	IPVersion int     `json:"ip_version,omitempty"` // 4 or 6
	Src       string  `json:"src,omitempty"`        // "192.0.2.11:49441", "[2001:db8::1]:49441"
	Dst       string  `json:"dst,omitempty"`

	BTH       *BTHRecord       `json:"bth,omitempty"`
	DETH      *DETHRecord      `json:"deth,omitempty"`
	RETH      *RETHRecord      `json:"reth,omitempty"`
	AtomicETH *AtomicETHRecord `json:"atomic_eth,omitempty"`
	AETH      *AETHRecord      `json:"aeth,omitempty"`
	AtomicAck *AtomicAckRecord `json:"atomic_ack_eth,omitempty"`
	ImmDt     *uint32          `json:"imm_dt,omitempty"`
	IETH      *uint32          `json:"ieth_rkey,omitempty"` // R_Key to invalidate
	OOO       *OOORecord       `json:"ooo,omitempty"`       // the OOO headers (OOO opcodes only)
	SACK      *SACKRecord      `json:"sack,omitempty"`      // SR_SACK's bitmap (sr.go)

	PayloadLen int `json:"payload_len"`
	// Payload is what a registered PayloadDescriber recognised in the
	// payload (see RegisterPayloadDescriber), PayloadKind its name.
	Payload     string `json:"payload,omitempty"`
	PayloadKind string `json:"payload_kind,omitempty"`

	ICRC *ICRCRecord `json:"icrc,omitempty"`
}

// BTHRecord is the Base Transport Header.
type BTHRecord struct {
	Opcode    string `json:"opcode"`     // "RC_SEND_ONLY"
	OpcodeNum uint8  `json:"opcode_num"` // 4
	DestQPN   uint32 `json:"dest_qpn"`
	PSN       uint32 `json:"psn"`
	AckReq    bool   `json:"ack_req"`
	SE        bool   `json:"se"`
	MigReq    bool   `json:"mig_req"`
	PadCount  uint8  `json:"pad_count"`
	PKey      uint16 `json:"pkey"`
	FECN      bool   `json:"fecn"`
	BECN      bool   `json:"becn"`
}

// RETHRecord is the RDMA Extended Transport Header.
type RETHRecord struct {
	VA     string `json:"va"` // "0x00007f0000001000"
	RKey   uint32 `json:"rkey"`
	DMALen uint32 `json:"dma_len"`
}

// AETHRecord is the ACK Extended Transport Header with its syndrome decoded.
type AETHRecord struct {
	Syndrome uint8  `json:"syndrome"`
	Type     string `json:"type"`    // "ACK", "RNR_NAK", "NAK" or "reserved"
	Value    uint8  `json:"value"`   // credit count, RNR timer code or NAK code
	Meaning  string `json:"meaning"` // "credits unlimited", "timer 0.64ms", "remote access error"
	MSN      uint32 `json:"msn"`
}

// AtomicETHRecord is the Atomic Extended Transport Header.
type AtomicETHRecord struct {
	VA      string `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd string `json:"swap_add"`
	Compare string `json:"compare"`
}

// AtomicAckRecord is the Atomic ACK Extended Transport Header.
type AtomicAckRecord struct {
	Orig string `json:"orig"`
}

// DETHRecord is the Datagram Extended Transport Header.
type DETHRecord struct {
	QKey   uint32 `json:"qkey"`
	SrcQPN uint32 `json:"src_qpn"`
}

// ICRCRecord is the ICRC verdict.
type ICRCRecord struct {
	Value uint32 `json:"value"` // as found in the frame
	Want  uint32 `json:"want"`  // as computed over the frame
	OK    bool   `json:"ok"`
}

// Bad reports whether r is a RoCE frame that does not decode or whose ICRC
// is wrong: what `xdproce dump --verify` fails on.
func (r *Record) Bad() bool {
	return r.RoCE && (r.Error != "" || r.ICRC == nil || !r.ICRC.OK)
}

// A PayloadDescriber recognises payloads of a higher-layer protocol carried
// in RoCE packets (for example the enlargement layer's ENLARGE_REQ and
// ENLARGE_ACK control messages, known by a 4-byte magic at the start of a
// SEND payload). It returns a short description ("ENLARGE_REQ phase 1 size
// 8192") and true, or false when the payload is not one of its own. p is
// fully decoded; p.Payload aliases the frame and must not be kept.
type PayloadDescriber func(p *wire.Packet) (string, bool)

var payloadDescribers struct {
	sync.RWMutex
	list []namedDescriber
}

type namedDescriber struct {
	name string
	fn   PayloadDescriber
}

// RegisterPayloadDescriber adds d under name (e.g. "enlarge"); Describe asks
// the describers in registration order and keeps the first description. Safe
// for concurrent use; usually called from an init function.
func RegisterPayloadDescriber(name string, d PayloadDescriber) {
	payloadDescribers.Lock()
	defer payloadDescribers.Unlock()
	payloadDescribers.list = append(payloadDescribers.list, namedDescriber{name, d})
}

func describePayload(p *wire.Packet) (name, desc string) {
	payloadDescribers.RLock()
	defer payloadDescribers.RUnlock()
	for _, d := range payloadDescribers.list {
		if s, ok := d.fn(p); ok {
			return d.name, s
		}
	}
	return "", ""
}

// Describe decodes f and returns its Record. It never fails: a frame that is
// not RoCEv2 gets a Summary, a RoCE frame that does not decode gets an Error.
func Describe(f *Frame) *Record {
	r := &Record{Index: f.Index, Time: f.Time, Len: len(f.Data)}
	if f.OrigLen > len(f.Data) {
		r.OrigLen = f.OrigLen
	}
	if f.Dir != DirUnknown {
		r.Dir = f.Dir.String()
	}
	if f.LinkType != LinkTypeEthernet {
		r.Summary = "non-Ethernet link type " + strconv.Itoa(int(f.LinkType))
		return r
	}
	var p wire.Packet
	describeFrame(r, &p, f.Data)
	return r
}

func describeFrame(r *Record, p *wire.Packet, data []byte) {
	l3 := sniff(data)
	if l3.vlan {
		tci := l3.tci
		r.VLAN = &tci
	}
	r.IPVersion = l3.ipVersion
	if l3.ipVersion != 0 {
		r.Src, r.Dst = hostPort(l3.src, l3.sport, l3.ports), hostPort(l3.dst, l3.dport, l3.ports)
	}
	if !l3.roce {
		r.Summary = l3.summary()
		return
	}
	r.RoCE = true
	// A capture shows every frame: the OOO and SR opcodes too, which a
	// receiver accepts only once OOO mode or selective repeat is negotiated.
	err := p.DecodeWith(data, wire.AcceptOOO|wire.AcceptSR)
	switch {
	case err == nil, errors.Is(err, wire.ErrBadICRC), errors.Is(err, wire.ErrBadChecksum):
	default:
		r.Error = err.Error()
		// The BTH may still be readable: show what it says, so a person sees
		// which QP the broken frame was for.
		if bth := l3.l4Payload; len(bth) >= wire.BTHLen {
			r.BTH = &BTHRecord{
				Opcode:    wire.Opcode(bth[0]).String(),
				OpcodeNum: bth[0],
				DestQPN:   binary.BigEndian.Uint32(bth[4:]) & 0xFFFFFF,
				PSN:       binary.BigEndian.Uint32(bth[8:]) & 0xFFFFFF,
				AckReq:    bth[8]&0x80 != 0,
				SE:        bth[1]&0x80 != 0,
				MigReq:    bth[1]&0x40 != 0,
				PadCount:  bth[1] >> 4 & 3,
				PKey:      binary.BigEndian.Uint16(bth[2:]),
				FECN:      bth[4]&0x80 != 0,
				BECN:      bth[4]&0x40 != 0,
			}
		}
		return
	}
	if errors.Is(err, wire.ErrBadChecksum) {
		r.Error = err.Error()
	}
	fillRecord(r, p)
	want, cerr := wire.ComputeICRC(data)
	r.ICRC = &ICRCRecord{Value: p.ICRC, Want: want, OK: cerr == nil && want == p.ICRC}
}

func fillRecord(r *Record, p *wire.Packet) {
	b := &p.BTH
	r.BTH = &BTHRecord{
		Opcode: b.Opcode.String(), OpcodeNum: uint8(b.Opcode), DestQPN: b.DestQPN, PSN: b.PSN,
		AckReq: b.AckReq, SE: b.SE, MigReq: b.MigReq, PadCount: b.PadCount, PKey: b.PKey,
		FECN: b.FECN, BECN: b.BECN,
	}
	info, _ := b.Opcode.Info()
	h := info.Headers
	if h&wire.HasDETH != 0 {
		r.DETH = &DETHRecord{QKey: p.DETH.QKey, SrcQPN: p.DETH.SrcQPN}
	}
	if h&wire.HasRETH != 0 {
		r.RETH = &RETHRecord{VA: hex64(p.RETH.VA), RKey: p.RETH.RKey, DMALen: p.RETH.DMALen}
	}
	if h&wire.HasAtomicETH != 0 {
		r.AtomicETH = &AtomicETHRecord{VA: hex64(p.Atomic.VA), RKey: p.Atomic.RKey,
			SwapAdd: hex64(p.Atomic.SwapAdd), Compare: hex64(p.Atomic.Compare)}
	}
	if h&wire.HasAETH != 0 {
		r.AETH = describeAETH(p.AETH)
	}
	if h&wire.HasAtomicAckETH != 0 {
		r.AtomicAck = &AtomicAckRecord{Orig: hex64(p.AtomicAck.Orig)}
	}
	if h&wire.HasImmDt != 0 {
		v := p.ImmDt
		r.ImmDt = &v
	}
	if h&wire.HasIETH != 0 {
		v := p.IETH
		r.IETH = &v
	}
	if h&wire.HasXRH != 0 {
		r.OOO = describeOOO(p, h)
	}
	r.PayloadLen = len(p.Payload)
	if b.Opcode == wire.SRSack {
		r.SACK = describeSACK(p) // its payload is the bitmap
		return
	}
	if len(p.Payload) > 0 {
		r.PayloadKind, r.Payload = describePayload(p)
	}
}

// rnrTimerMS are the RNR NAK timer values in milliseconds (IBA 9.7.5.2.8,
// table 45), indexed by the 5-bit code.
var rnrTimerMS = [32]string{
	"655.36", "0.01", "0.02", "0.03", "0.04", "0.06", "0.08", "0.12",
	"0.16", "0.24", "0.32", "0.48", "0.64", "0.96", "1.28", "1.92",
	"2.56", "3.84", "5.12", "7.68", "10.24", "15.36", "20.48", "30.72",
	"40.96", "61.44", "81.92", "122.88", "163.84", "245.76", "327.68", "491.52",
}

var nakMeaning = [...]string{
	0: "PSN sequence error",
	1: "invalid request",
	2: "remote access error",
	3: "remote operational error",
	4: "invalid RD request",
}

func describeAETH(a wire.AETH) *AETHRecord {
	v := a.Syndrome & 0x1F
	r := &AETHRecord{Syndrome: a.Syndrome, Value: v, MSN: a.MSN}
	switch a.Type() {
	case wire.SyndromeACK:
		r.Type = "ACK"
		if v == wire.UnlimitedCredits {
			r.Meaning = "credits unlimited"
		} else {
			r.Meaning = "credits " + strconv.Itoa(int(v))
		}
	case wire.SyndromeRNR:
		r.Type = "RNR_NAK"
		r.Meaning = "timer " + rnrTimerMS[v] + "ms"
	case wire.SyndromeNAK:
		r.Type = "NAK"
		if int(v) < len(nakMeaning) {
			r.Meaning = nakMeaning[v]
		} else {
			r.Meaning = "reserved NAK code " + strconv.Itoa(int(v))
		}
	default:
		r.Type = "reserved"
		r.Meaning = "reserved syndrome 0x" + strconv.FormatUint(uint64(a.Syndrome), 16)
	}
	return r
}

func hex64(v uint64) string {
	const digits = "0123456789abcdef"
	var b [18]byte
	b[0], b[1] = '0', 'x'
	for i := 17; i >= 2; i-- {
		b[i] = digits[v&0xF]
		v >>= 4
	}
	return string(b[:])
}

func hostPort(a netip.Addr, port uint16, withPort bool) string {
	if !withPort {
		return a.String()
	}
	return netip.AddrPortFrom(a, port).String()
}

// l3info is what sniff finds in a frame's Ethernet, IP and transport headers.
type l3info struct {
	vlan      bool
	tci       uint16
	etherType uint16
	ipVersion int // 4 or 6 once the IP addresses are read
	proto     uint8
	fragment  bool
	src, dst  netip.Addr
	ports     bool // sport and dport are known (TCP, UDP, SCTP)
	sport     uint16
	dport     uint16
	roce      bool   // UDP to port 4791, not a fragment
	l4Payload []byte // UDP payload of a RoCE frame (from the BTH on)
	problem   string // why the headers could not be read further ("truncated", ...)
	frameLen  int
}

// sniff reads the headers of a frame far enough to tell RoCEv2 from the
// rest and to name the rest. It never fails; what it cannot read it names in
// problem.
func sniff(b []byte) l3info {
	l := l3info{frameLen: len(b)}
	if len(b) < 14 {
		l.problem = "runt"
		return l
	}
	l.etherType = binary.BigEndian.Uint16(b[12:])
	b = b[14:]
	if l.etherType == 0x8100 {
		if len(b) < 4 {
			l.problem = "802.1Q tag truncated"
			return l
		}
		l.vlan = true
		l.tci = binary.BigEndian.Uint16(b)
		l.etherType = binary.BigEndian.Uint16(b[2:])
		b = b[4:]
		if l.etherType == 0x8100 || l.etherType == 0x88A8 {
			l.problem = "stacked VLAN tags"
			return l
		}
	}
	var l4 []byte
	switch l.etherType {
	case 0x0800:
		if len(b) < 20 {
			l.problem = "IPv4 header truncated"
			return l
		}
		if v := b[0] >> 4; v != 4 {
			l.problem = "IPv4 ethertype, IP version " + strconv.Itoa(int(v))
			return l
		}
		l.ipVersion = 4
		ihl := int(b[0]&0xF) * 4
		l.proto = b[9]
		l.src = netip.AddrFrom4([4]byte(b[12:16]))
		l.dst = netip.AddrFrom4([4]byte(b[16:20]))
		l.fragment = binary.BigEndian.Uint16(b[6:])&0x1FFF != 0
		total := int(binary.BigEndian.Uint16(b[2:]))
		if ihl < 20 || ihl > len(b) || ihl > total {
			l.problem = "bad IPv4 header length " + strconv.Itoa(ihl)
			return l
		}
		l4 = b[ihl:min(total, len(b))]
	case 0x86DD:
		if len(b) < 40 {
			l.problem = "IPv6 header truncated"
			return l
		}
		if v := b[0] >> 4; v != 6 {
			l.problem = "IPv6 ethertype, IP version " + strconv.Itoa(int(v))
			return l
		}
		l.ipVersion = 6
		l.proto = b[6]
		l.src = netip.AddrFrom16([16]byte(b[8:24]))
		l.dst = netip.AddrFrom16([16]byte(b[24:40]))
		l4 = b[40:min(40+int(binary.BigEndian.Uint16(b[4:])), len(b))]
	default:
		return l
	}
	if l.fragment {
		return l
	}
	switch l.proto {
	case 6, 17, 132: // TCP, UDP, SCTP: ports first
		if len(l4) < 4 {
			l.problem = "truncated"
			return l
		}
		l.ports = true
		l.sport = binary.BigEndian.Uint16(l4)
		l.dport = binary.BigEndian.Uint16(l4[2:])
		if l.proto == 17 && l.dport == wire.UDPPort {
			l.roce = true
			if len(l4) >= 8 {
				l.l4Payload = l4[8:]
			}
		}
	}
	return l
}

var etherTypeNames = map[uint16]string{
	0x0806: "ARP", 0x88A8: "802.1ad (QinQ)", 0x88CC: "LLDP", 0x8035: "RARP", 0x8915: "RoCEv1", 0x88F7: "PTP",
}

var protoNames = map[uint8]string{
	1: "ICMP", 2: "IGMP", 6: "TCP", 17: "UDP", 58: "ICMPv6", 132: "SCTP",
}

func (l *l3info) summary() string {
	if l.ipVersion == 0 {
		s := "non-RoCE "
		switch {
		case l.problem == "runt":
			return s + "runt frame (" + strconv.Itoa(l.frameLen) + " bytes)"
		case l.problem != "":
			return s + "frame: " + l.problem
		}
		if n, ok := etherTypeNames[l.etherType]; ok {
			return s + n
		}
		return s + "ethertype 0x" + strconv.FormatUint(uint64(l.etherType)|0x10000, 16)[1:]
	}
	s := "non-RoCE IPv" + strconv.Itoa(l.ipVersion)
	if l.fragment {
		return s + " fragment " + l.src.String() + " → " + l.dst.String()
	}
	if n, ok := protoNames[l.proto]; ok {
		s += " " + n
	} else {
		s += " proto " + strconv.Itoa(int(l.proto))
	}
	if l.ports {
		s += " " + hostPort(l.src, l.sport, true) + " → " + hostPort(l.dst, l.dport, true)
	} else {
		s += " " + l.src.String() + " → " + l.dst.String()
	}
	if l.problem != "" {
		s += " (" + l.problem + ")"
	}
	return s
}
