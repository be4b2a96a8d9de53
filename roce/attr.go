package roce

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// AtomicCap says which atomic operations a device performs and how they
// are ordered with other accesses (enum ibv_atomic_cap).
type AtomicCap int

const (
	AtomicNone AtomicCap = 0 // IBV_ATOMIC_NONE: no atomic operations
	// AtomicHCA (IBV_ATOMIC_HCA): atomics are atomic among the operations
	// of this device (the engine runs them one at a time), not against
	// the application's CPU accesses to the same memory.
	AtomicHCA  AtomicCap = 1
	AtomicGlob AtomicCap = 2 // IBV_ATOMIC_GLOB: also against CPU accesses
)

var atomicCapNames = map[int]string{0: "ATOMIC_NONE", 1: "ATOMIC_HCA", 2: "ATOMIC_GLOB"}

func (a AtomicCap) String() string { return enumName(atomicCapNames, int(a), "AtomicCap") }

// DeviceAttr are a device's attributes, as ibv_query_device returns them
// (the fields ibv_devinfo -v prints). The limits are the ones the device
// enforces: creating or modifying beyond them fails.
type DeviceAttr struct {
	FWVer        string // "0.0.0", as rxe reports it
	NodeGUID     uint64 // EUI-64 of the MAC address, as rxe makes it
	SysImageGUID uint64 // the node GUID
	// MaxMRSize is the largest region RegMR takes: any Go slice (rxe
	// reports 2^64-1).
	MaxMRSize    uint64
	PageSizeCap  uint64 // page sizes: rxe's 0xfffff000 (regions are byte-granular)
	VendorID     uint32 // 0xffffff, rxe's (IBTA: no vendor)
	VendorPartID uint32 // 0, as rxe
	HWVer        uint32 // 0, as rxe
	MaxQP        int    // queue pairs at once (Options.MaxQPs)
	MaxQPWR      int    // work requests per queue (QPConfig.MaxSendWR, MaxRecvWR)
	MaxSGE       int    // scatter/gather entries per work request (QPConfig.MaxSGE)
	MaxSGERD     int    // the same for RDMA READ
	MaxInline    int    // inline data bytes per send work request (QPConfig.MaxInline)
	// MaxCQ and MaxPD: xdproce sets no limit of its own (memory does);
	// math.MaxInt32, the largest an ibv_device_attr field holds.
	MaxCQ  int
	MaxCQE int // completions per CQ (CreateCQ's depth)
	MaxMR  int // memory regions at once (Options.MaxMRs)
	MaxPD  int
	// MaxQPRdAtom is the largest max_dest_rd_atomic (READ and atomic
	// requests a queue pair answers at once) and MaxQPInitRdAtom the
	// largest max_rd_atomic (outstanding as requester) Modify takes.
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	// MaxResRdAtom is MaxQP × MaxQPRdAtom: each queue pair keeps its own
	// responder resources.
	MaxResRdAtom int
	AtomicCap    AtomicCap // AtomicHCA: compare-and-swap and fetch-and-add
	MaxSRQ       int       // shared receive queues (MaxSRQ)
	MaxSRQWR     int       // work requests per SRQ (SRQConfig.MaxWR)
	MaxSRQSGE    int       // SGEs per SRQ work request (SRQConfig.MaxSGE)
	MaxPKeys     int       // 1: the default P_Key 0xffff
	PhysPortCnt  int       // 1
}

// PortState is a port's logical state (enum ibv_port_state).
type PortState int

const (
	PortDown   PortState = 1 // IBV_PORT_DOWN
	PortActive PortState = 4 // IBV_PORT_ACTIVE
)

var portStateNames = map[int]string{1: "PORT_DOWN", 4: "PORT_ACTIVE"}

func (s PortState) String() string { return enumName(portStateNames, int(s), "PortState") }

// PhysState is a port's physical state as ibv_devinfo prints it
// (phys_state: 3 DISABLED, 5 LINK_UP).
type PhysState int

const (
	PhysDisabled PhysState = 3
	PhysLinkUp   PhysState = 5
)

var physStateNames = map[int]string{3: "DISABLED", 5: "LINK_UP"}

func (s PhysState) String() string { return enumName(physStateNames, int(s), "PhysState") }

// PortAttr are the attributes of a device's port, as ibv_query_port returns
// them.
type PortAttr struct {
	State     PortState // active while the interface is up with carrier
	PhysState PhysState
	// MaxMTU is the largest path MTU the engine implements (4096, as rxe);
	// ActiveMTU the largest the interface's MTU carries (Device.PathMTU).
	MaxMTU, ActiveMTU MTU
	GIDTblLen         int    // GIDTableLen
	MaxMsgSz          uint32 // largest message (2^31)
	PKeyTblLen        int    // 1
	LinkLayer         string // "Ethernet"
	// ActiveWidth and ActiveSpeed are the IB width and speed codes rxe
	// derives from the interface's ethtool speed (ActiveRate prints them);
	// an interface without one counts as 1 Gb/s, as in rxe: 1X SDR.
	ActiveWidth, ActiveSpeed uint8
	// SpeedMbps is the interface's speed from ethtool (0: unknown).
	SpeedMbps int
}

// ActiveRate describes ActiveWidth and ActiveSpeed as ibv_devinfo does,
// e.g. "1X", "10.0 Gbps".
func (p PortAttr) ActiveRate() (width, speed string) {
	width, speed = ibWidths[p.ActiveWidth], ibSpeeds[p.ActiveSpeed]
	if width == "" {
		width = "invalid width"
	}
	if speed == "" {
		speed = "invalid speed"
	}
	return width, speed
}

var (
	ibWidths = map[uint8]string{1: "1X", 2: "4X", 4: "8X", 8: "12X", 16: "2X"}
	ibSpeeds = map[uint8]string{1: "2.5 Gbps", 2: "5.0 Gbps", 4: "10.0 Gbps", 8: "10.0 Gbps", 16: "14.0 Gbps",
		32: "25.0 Gbps", 64: "50.0 Gbps", 128: "100.0 Gbps"}
)

// enumName is names[v], or typ(v) for a value without a name.
func enumName(names map[int]string, v int, typ string) string {
	if n, ok := names[v]; ok {
		return n
	}
	return typ + "(" + strconv.Itoa(v) + ")"
}

// ibRate maps an Ethernet speed to the IB width and speed codes as rxe does
// (ib_get_eth_speed, without lane counts); unknown speeds count as 1000.
func ibRate(mbps int) (width, speed uint8) {
	if mbps <= 0 {
		mbps = 1000
	}
	for _, r := range ibRates {
		if mbps <= r.upTo {
			return r.width, r.speed
		}
	}
	return 2, 128 // 4X NDR
}

// ibRates: up to upTo Mb/s, the width (1 1X, 16 2X, 2 4X) and speed (1 SDR,
// 2 DDR, 8 FDR10, 32 EDR, 64 HDR) codes rxe reports.
var ibRates = []struct {
	upTo         int
	width, speed uint8
}{
	{1000, 1, 1}, {10000, 1, 8}, {20000, 2, 2}, {25000, 1, 32}, {40000, 2, 8},
	{50000, 16, 32}, {100000, 2, 32}, {200000, 2, 64},
}

// deviceAttr computes the attributes of a device with MAC hw and options o.
func deviceAttr(hw [6]byte, o *Options) DeviceAttr {
	ll := LinkLocalGID(hw).As16()
	guid := binary.BigEndian.Uint64(ll[8:])
	maxQP := cmp.Or(o.MaxQPs, DefaultMaxQPs)
	return DeviceAttr{
		FWVer: "0.0.0", NodeGUID: guid, SysImageGUID: guid,
		MaxMRSize: math.MaxInt, PageSizeCap: 0xfffff000,
		VendorID: 0xffffff,
		MaxQP:    maxQP, MaxQPWR: qp.MaxWR, MaxSGE: qp.MaxSGELimit, MaxSGERD: qp.MaxSGELimit,
		MaxInline: qp.MaxInlineLimit,
		MaxCQ:     math.MaxInt32, MaxCQE: MaxCQDepth,
		MaxMR: cmp.Or(o.MaxMRs, mr.DefaultMaxMRs), MaxPD: math.MaxInt32,
		MaxQPRdAtom: qp.MaxRdAtomicLimit, MaxQPInitRdAtom: qp.MaxRdAtomicLimit,
		MaxResRdAtom: maxQP * qp.MaxRdAtomicLimit,
		AtomicCap:    AtomicHCA,
		MaxSRQ:       qp.MaxSRQ, MaxSRQWR: qp.MaxWR, MaxSRQSGE: qp.MaxSGELimit,
		MaxPKeys: 1, PhysPortCnt: 1,
	}
}

// portAttr computes a port's attributes.
func portAttr(up bool, pmtu MTU, speedMbps int) PortAttr {
	p := PortAttr{State: PortDown, PhysState: PhysDisabled, MaxMTU: wire.MTU4096, ActiveMTU: pmtu,
		GIDTblLen: GIDTableLen, MaxMsgSz: qp.MaxMessage, PKeyTblLen: 1, LinkLayer: "Ethernet",
		SpeedMbps: speedMbps}
	if up {
		p.State, p.PhysState = PortActive, PhysLinkUp
	}
	p.ActiveWidth, p.ActiveSpeed = ibRate(speedMbps)
	return p
}

// Query returns the device's attributes (ibv_query_device).
func (d *Device) Query() DeviceAttr { return deviceAttr(d.hw, &d.opts) }

// QueryPort returns the attributes of port 1, the only one
// (ibv_query_port): its state follows the interface for devices made by
// Open.
func (d *Device) QueryPort(port int) (PortAttr, error) {
	if port != 1 {
		return PortAttr{}, fmt.Errorf("roce: query port %d: the device has port 1 only", port)
	}
	d.port.mu.Lock()
	up, speed := d.port.up, d.port.speedMbps
	d.port.mu.Unlock()
	return portAttr(up, d.pmtu, speed), nil
}
