package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// perftest's out-of-band exchange, as perftest 6.06 (Debian's 4.5+0.17) speaks it over TCP
// (its "Ethernet" data exchange method, the default). Every step is a symmetric exchange of one
// fixed-size message: the client writes first and then reads, the server reads and then writes.
// perftest reads each message with a single read(2) of the exact size, so each message must
// leave in one write; Go's TCP connections have TCP_NODELAY set, so one Write is one segment.

// PerftestVersion is the version string xdproce announces: perftest 6.06's. The peer chooses
// message formats from it (MTU as 2 characters from 5.31, system data from 5.32, 8-byte
// iteration counts from 5.33), as this side does from the peer's.
const PerftestVersion = "6.06"

const (
	perftestVersionLen  = 16  // sizeof(user_param->version)
	PerftestKeyLen      = 108 // KEY_MSG_SIZE_GID: the key message with a GID, NUL included
	PerftestKeyLenNoGID = 59  // KEY_MSG_SIZE: without a GID (InfiniBand with LIDs)
)

// PerftestDest is perftest's struct pingpong_dest as its key message carries it:
// "%04x:%04x:%06x:%06x:%08x:%016llx:" LID, out_reads, QPN, PSN, rkey, VA, then the 16 GID bytes
// as "%02x:" each and "%08x:" SRQ number, NUL-terminated (108 bytes). Without a GID the
// message is "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" (59 bytes).
type PerftestDest struct {
	LID      uint16
	OutReads uint16 // outstanding RDMA READ/atomic requests the side accepts (rxe: 128)
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64 // where the peer may WRITE/READ (its buffer for this QP)
	GID      GID
	SRQN     uint32
	NoGID    bool   // use the 59-byte message without GID (not for RoCE)
	GIDIndex uint32 // perftest's gid_index: carried by the rdma_cm mode's message only (MarshalCM)
}

// Marshal returns the key message (108 bytes, or 59 with NoGID).
func (d PerftestDest) Marshal() ([]byte, error) {
	if d.QPN > 0xffffff || d.PSN > 0xffffff {
		return nil, fmt.Errorf("cm: perftest keys: QPN 0x%x or PSN 0x%x over 24 bits", d.QPN, d.PSN)
	}
	b := make([]byte, 0, PerftestKeyLen)
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.OutReads), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.RKey), 8)
	b = append(b, ':')
	b = appendHex(b, d.VAddr, 16)
	b = append(b, ':')
	if d.NoGID {
		b = appendHex(b, uint64(d.SRQN), 8)
		return append(b, 0), nil
	}
	for _, x := range d.GID {
		b = appendHex(b, uint64(x), 2)
		b = append(b, ':')
	}
	b = appendHex(b, uint64(d.SRQN), 8)
	b = append(b, ':', 0)
	return b, nil
}

// UnmarshalPerftestDest parses a key message of either length.
func UnmarshalPerftestDest(b []byte) (PerftestDest, error) {
	var d PerftestDest
	s := string(b)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Split(strings.TrimSuffix(s, ":"), ":")
	bad := func(what string) (PerftestDest, error) {
		return PerftestDest{}, fmt.Errorf("cm: perftest keys %q: %w: %s", s, ErrProtocol, what)
	}
	switch len(f) {
	case 7:
		d.NoGID = true
	case 23:
	default:
		return bad(fmt.Sprintf("%d fields, want 23 (with GID) or 7", len(f)))
	}
	widths := []int{4, 4, 6, 6, 8, 16}
	var v [6]uint64
	for i, w := range widths {
		if len(f[i]) != w {
			return bad("field " + strconv.Itoa(i+1) + " has the wrong width")
		}
		x, err := strconv.ParseUint(f[i], 16, 64)
		if err != nil {
			return bad("field " + strconv.Itoa(i+1) + " is not hex")
		}
		v[i] = x
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr = uint16(v[0]), uint16(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5]
	if d.QPN > 0xffffff || d.PSN > 0xffffff {
		return bad("QPN or PSN over 24 bits")
	}
	rest := f[6:]
	if !d.NoGID {
		for i := range 16 {
			x, err := strconv.ParseUint(rest[i], 16, 8)
			if err != nil || len(rest[i]) != 2 {
				return bad("gid byte " + strconv.Itoa(i) + " is not 2 hex digits")
			}
			d.GID[i] = byte(x)
		}
		rest = rest[16:]
	}
	srqn, err := strconv.ParseUint(rest[0], 16, 32)
	if err != nil || len(rest[0]) != 8 {
		return bad("srqn is not 8 hex digits")
	}
	d.SRQN = uint32(srqn)
	return d, nil
}

// PerftestReport is perftest's struct bw_report_data as xchg_bw_reports carries it: the
// message size, iterations, peak and average bandwidth (MB/s, or Gb/s with --report_gbits) and
// message rate (Mpps). Each field is exchanged as its own message, big-endian (the doubles as
// their byte-swapped IEEE 754 bits).
type PerftestReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// PerftestTest names the perftest tools xdproce speaks to.
type PerftestTest int

const (
	WriteBW  PerftestTest = iota + 1 // ib_write_bw
	ReadBW                           // ib_read_bw
	SendBW                           // ib_send_bw
	AtomicBW                         // ib_atomic_bw
	SendLat                          // ib_send_lat
)

var perftestNames = [...]string{WriteBW: "ib_write_bw", ReadBW: "ib_read_bw", SendBW: "ib_send_bw", AtomicBW: "ib_atomic_bw", SendLat: "ib_send_lat"}

func (t PerftestTest) String() string {
	if t >= WriteBW && int(t) < len(perftestNames) {
		return perftestNames[t]
	}
	return "PerftestTest(" + strconv.Itoa(int(t)) + ")"
}

// PerftestPlan gives the number of key handshakes each tool makes before its data phase (the
// first carries the QP's keys, the others are barriers) and whether it exchanges bandwidth
// reports after it. Observed in captures of perftest 6.06 between two rxe peers: write, read and
// atomic make 3 handshakes before the data, then one, then the reports, then the closing one;
// send_bw and send_lat make 4 before, and only the closing one after.
type PerftestPlan struct {
	PreRunHandshakes int  // including the one carrying the keys
	Reports          bool // a handshake then xchg_bw_reports after the data phase
	// KeyLoops are the two pre-run handshakes perftest makes once per queue pair with -q N
	// (its loops over my_dest[i]; the others are made once, with my_dest[0]): the first and
	// second in write, read and atomic, the first and third in send_bw and send_lat.
	KeyLoops [2]int
}

// Plan returns the tool's plan.
func (t PerftestTest) Plan() PerftestPlan {
	switch t {
	case WriteBW, ReadBW, AtomicBW:
		return PerftestPlan{PreRunHandshakes: 3, Reports: true, KeyLoops: [2]int{0, 1}}
	case SendBW, SendLat:
		return PerftestPlan{PreRunHandshakes: 4, KeyLoops: [2]int{0, 2}}
	}
	return PerftestPlan{}
}

// PerftestConn runs perftest's steps on one TCP connection (or, made by NewPerftestCMConn, over
// the messages of its rdma_cm mode). Client is the side that connected (perftest's
// "servername" side); it writes first in every exchange.
type PerftestConn struct {
	Conn   net.Conn
	Client bool
	msgs   PerftestMessages // the rdma_cm mode's control channel (Conn is nil then)
	// Timeout bounds each exchange (default 60 s): a peer that stops answering is an error,
	// not a hang.
	Timeout time.Duration

	remoteVersion string
	remoteVer     float64
}

// NewPerftestConn wraps an established connection.
func NewPerftestConn(conn net.Conn, client bool) *PerftestConn {
	return &PerftestConn{Conn: conn, Client: client}
}

// RemoteVersion is the version string the peer announced ("" before ExchangeVersions).
func (c *PerftestConn) RemoteVersion() string { return c.remoteVersion }

// Exchange sends mine and receives the peer's message of the same size, in perftest's order.
func (c *PerftestConn) Exchange(ctx context.Context, mine []byte) ([]byte, error) {
	if c.Client {
		if err := c.write(ctx, mine); err != nil {
			return nil, err
		}
	}
	theirs, err := c.read(ctx, len(mine))
	if err != nil {
		return nil, err
	}
	if !c.Client {
		if err := c.write(ctx, mine); err != nil {
			return nil, err
		}
	}
	return theirs, nil
}

// bound sets the deadline of one message (Timeout, default 60 s) and ends it with ctx.
func (c *PerftestConn) bound(ctx context.Context) func() {
	to := c.Timeout
	if to == 0 {
		to = 60 * time.Second
	}
	// The deadline first: a context that has already ended moves it into the past at once.
	c.Conn.SetDeadline(time.Now().Add(to))
	stop := watchContext(ctx, c.Conn)
	return func() { stop(); c.Conn.SetDeadline(time.Time{}) }
}

func (c *PerftestConn) write(ctx context.Context, b []byte) error {
	if c.msgs != nil {
		return c.sendMsg(ctx, b)
	}
	defer c.bound(ctx)()
	if _, err := c.Conn.Write(b); err != nil {
		return ctxErr(ctx, fmt.Errorf("cm: perftest: send %d bytes: %w", len(b), err))
	}
	return nil
}

func (c *PerftestConn) read(ctx context.Context, n int) ([]byte, error) {
	if c.msgs != nil {
		return c.recvMsg(ctx, n)
	}
	defer c.bound(ctx)()
	b := make([]byte, n)
	if _, err := io.ReadFull(c.Conn, b); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("cm: perftest: read %d bytes: %w", n, eofProtocol(err)))
	}
	return b, nil
}

// keyHandShake is the handshake that carries the keys. On a connection with a Negotiation it
// is where two xdproce ends recognise each other (negotiate.go): the server answers a tagged
// client with the hello instead of its keys, and both return the agreement.
func (c *PerftestConn) keyHandShake(ctx context.Context, local PerftestDest) (PerftestDest, error) {
	n := negotiation(c.Conn)
	if n == nil || c.msgs != nil {
		return c.HandShake(ctx, local)
	}
	msg, err := local.Marshal()
	if err != nil {
		return PerftestDest{}, err
	}
	if c.Client {
		b, err := c.Exchange(ctx, msg)
		if err != nil {
			return PerftestDest{}, err
		}
		if isBenchHello(b) {
			return PerftestDest{}, n.askServer(ctx, c.Conn, b)
		}
		remote, err := UnmarshalPerftestDest(b)
		if err == nil && n.Stock != nil {
			err = n.Stock()
		}
		return remote, err
	}
	b, err := c.read(ctx, len(msg))
	if err != nil {
		return PerftestDest{}, err
	}
	remote, err := UnmarshalPerftestDest(b)
	if err != nil {
		return remote, err
	}
	tagged := remote.PSN == TagPSN(remote.QPN, remote.GID, remote.RKey, remote.VAddr)
	if handled, err := n.answerClient(ctx, c.Conn, tagged, len(msg)); handled || err != nil {
		return remote, err
	}
	return remote, c.write(ctx, msg)
}

// ExchangeVersions sends version (PerftestVersion when empty) as 16 NUL-padded bytes and
// returns the peer's.
func (c *PerftestConn) ExchangeVersions(ctx context.Context, version string) (string, error) {
	if version == "" {
		version = PerftestVersion
	}
	if len(version) >= perftestVersionLen {
		return "", fmt.Errorf("cm: perftest: version %q longer than %d bytes", version, perftestVersionLen-1)
	}
	msg := make([]byte, perftestVersionLen)
	copy(msg, version)
	b, err := c.Exchange(ctx, msg)
	if err != nil {
		return "", err
	}
	if controlFrameStart(b) {
		return "", controlPeerErr("perftest: versions")
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	c.remoteVersion = string(b)
	c.remoteVer = atof(c.remoteVersion)
	if c.remoteVer < 4 {
		return c.remoteVersion, fmt.Errorf("cm: perftest: %w: peer version %q (is it perftest?)", ErrProtocol, b)
	}
	return c.remoteVersion, nil
}

// ExchangeSysData exchanges the cycle buffer (page size) and cache line size when the peer is
// 5.32 or newer (returns ok false otherwise, exchanging nothing). perftest takes the larger of
// each pair.
func (c *PerftestConn) ExchangeSysData(ctx context.Context, cycleBuffer, cacheLine uint32) (remCycle, remLine uint32, ok bool, err error) {
	if c.remoteVer < 5.32 {
		return 0, 0, false, nil
	}
	b, err := c.Exchange(ctx, binary.BigEndian.AppendUint32(nil, cycleBuffer))
	if err != nil {
		return 0, 0, false, err
	}
	remCycle = binary.BigEndian.Uint32(b)
	b, err = c.Exchange(ctx, binary.BigEndian.AppendUint32(nil, cacheLine))
	if err != nil {
		return 0, 0, false, err
	}
	return remCycle, binary.BigEndian.Uint32(b), true, nil
}

// ExchangeMTU exchanges the active MTU as its ibverbs enum (1 = 256 … 5 = 4096) in decimal
// text: 2 bytes from 5.31 ("3\0"), 4 before; nothing before 5.1. It returns the MTU both use:
// the smaller of the two valid ones.
func (c *PerftestConn) ExchangeMTU(ctx context.Context, mtu int) (int, error) {
	if mtu < 1 || mtu > 5 {
		return 0, fmt.Errorf("cm: perftest: mtu enum %d out of 1..5", mtu)
	}
	if c.remoteVer < 5.1 {
		return mtu, nil
	}
	n := 4
	if c.remoteVer >= 5.31 {
		n = 2
	}
	msg := make([]byte, n)
	msg[0] = byte('0' + mtu)
	b, err := c.Exchange(ctx, msg)
	if err != nil {
		return 0, err
	}
	rem := int(b[0] - '0')
	if rem >= 1 && rem <= 5 && rem < mtu {
		return rem, nil
	}
	return mtu, nil
}

// HandShake sends local's key message and returns the peer's (perftest's ctx_hand_shake).
func (c *PerftestConn) HandShake(ctx context.Context, local PerftestDest) (PerftestDest, error) {
	msg, err := c.marshalKeys(local)
	if err != nil {
		return PerftestDest{}, err
	}
	b, err := c.Exchange(ctx, msg)
	if err != nil {
		return PerftestDest{}, err
	}
	return c.unmarshalKeys(b)
}

// ExchangeReports runs xchg_bw_reports: size, iterations (8 bytes for a peer at 5.33 or newer,
// 4 before), peak BW, average BW and message rate, one message each.
func (c *PerftestConn) ExchangeReports(ctx context.Context, r PerftestReport) (PerftestReport, error) {
	var rem PerftestReport
	u64 := func(v uint64) ([]byte, error) { return c.Exchange(ctx, binary.BigEndian.AppendUint64(nil, v)) }
	b, err := u64(r.Size)
	if err != nil {
		return rem, err
	}
	rem.Size = binary.BigEndian.Uint64(b)
	if c.remoteVer >= 5.33 {
		if b, err = u64(r.Iters); err != nil {
			return rem, err
		}
		rem.Iters = binary.BigEndian.Uint64(b)
	} else {
		if b, err = c.Exchange(ctx, binary.BigEndian.AppendUint32(nil, uint32(r.Iters))); err != nil {
			return rem, err
		}
		rem.Iters = uint64(binary.BigEndian.Uint32(b))
	}
	for _, p := range []struct {
		mine   float64
		theirs *float64
	}{{r.BWPeak, &rem.BWPeak}, {r.BWAvg, &rem.BWAvg}, {r.MsgRate, &rem.MsgRate}} {
		if b, err = u64(math.Float64bits(p.mine)); err != nil {
			return rem, err
		}
		*p.theirs = math.Float64frombits(binary.BigEndian.Uint64(b))
	}
	return rem, nil
}

// Close runs ctx_close_connection: a last handshake, then each side writes "done\0" and closes.
// perftest never reads the peer's "done"; Close reads it (briefly) so that closing with unread
// data does not turn the FIN into a reset, then closes the connection.
func (c *PerftestConn) Close(ctx context.Context, local PerftestDest) error {
	if c.msgs != nil { // the rdma_cm mode: the handshake alone
		_, err := c.HandShake(ctx, local)
		return err
	}
	if _, err := c.HandShake(ctx, local); err != nil {
		c.Conn.Close()
		return err
	}
	_, err := c.Conn.Write([]byte("done\x00"))
	if err != nil {
		c.Conn.Close()
		return fmt.Errorf("cm: perftest: send done: %w", err)
	}
	c.Conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	done := make([]byte, 5)
	if _, rerr := io.ReadFull(c.Conn, done); rerr == nil && string(done) != "done\x00" {
		err = fmt.Errorf("cm: perftest: %w: want \"done\\x00\" at the end, got %q", ErrProtocol, done)
	}
	if cerr := c.Conn.Close(); err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = fmt.Errorf("cm: perftest: close: %w", cerr)
	}
	return err
}

// PerftestSetup is what one side brings to the steps before the data phase.
type PerftestSetup struct {
	Version     string // "" = PerftestVersion
	CycleBuffer uint32 // page size; 0 = 4096
	CacheLine   uint32 // 0 = 64
	MTU         int    // ibverbs MTU enum of this side's active MTU (3 = 1024)
	Local       PerftestDest
	// More are the keys of this side's other queue pairs (perftest's -q N: N-1 of them; the
	// rdma_cm mode only). Every key handshake of the plan's KeyLoops then carries them too.
	More []PerftestDest
	// Connect is called with the peer's keys after the first handshake: move the QP to RTR and
	// RTS there. The peer starts sending only after the handshakes that follow.
	Connect func(remote PerftestDest, mtu int) error
	// Ready is called before the last handshake before the data phase (post the receive
	// buffers of send_bw and send_lat there).
	Ready func() error
	// CMConnect connects the test queue pair through the RDMA CM, between the two handshakes
	// of zero keys the rdma_cm mode makes before the key handshake (NewPerftestCMConn only).
	CMConnect func() error
}

// Setup runs every step before the data phase of test t: versions, system data, MTU, the key
// handshake (then Connect), the barrier handshakes (Ready before the last). It returns the
// peer's keys and the MTU enum both sides use.
func (c *PerftestConn) Setup(ctx context.Context, t PerftestTest, s PerftestSetup) (PerftestDest, int, error) {
	r, mtu, err := c.SetupQPs(ctx, t, s)
	if len(r) == 0 {
		return PerftestDest{}, mtu, err
	}
	return r[0], mtu, err
}

// SetupQPs is Setup for perftest's -q N (s.More holds the keys of queue pairs 2 to N): the
// handshakes of the plan's KeyLoops run once per queue pair, and it returns the peer's keys
// for each, in order.
func (c *PerftestConn) SetupQPs(ctx context.Context, t PerftestTest, s PerftestSetup) ([]PerftestDest, int, error) {
	plan := t.Plan()
	if plan.PreRunHandshakes == 0 {
		return nil, 0, fmt.Errorf("cm: perftest: unknown test %v", t)
	}
	if len(s.More) > 0 && c.msgs == nil {
		return nil, 0, fmt.Errorf("cm: perftest: more than one queue pair needs the rdma_cm mode")
	}
	remotes := make([]PerftestDest, 1+len(s.More))
	loop := func(ctx context.Context) error { // the key handshakes of queue pairs 2..N
		for i, d := range s.More {
			var err error
			if remotes[1+i], err = c.HandShake(ctx, d); err != nil {
				return err
			}
		}
		return nil
	}
	if s.CycleBuffer == 0 {
		s.CycleBuffer = 4096
	}
	if s.CacheLine == 0 {
		s.CacheLine = 64
	}
	if _, err := c.ExchangeVersions(ctx, s.Version); err != nil {
		return nil, 0, err
	}
	if _, _, _, err := c.ExchangeSysData(ctx, s.CycleBuffer, s.CacheLine); err != nil {
		return nil, 0, err
	}
	mtu, err := c.ExchangeMTU(ctx, s.MTU)
	if err != nil {
		return nil, 0, err
	}
	if c.msgs != nil {
		if err := c.cmConnect(ctx, s.CMConnect); err != nil {
			return nil, mtu, err
		}
	}
	remote, err := c.keyHandShake(ctx, s.Local)
	if err == nil {
		err = loop(ctx)
	}
	if err != nil {
		return nil, 0, err
	}
	remotes[0] = remote
	if remote.NoGID != s.Local.NoGID {
		return remotes, mtu, fmt.Errorf("cm: perftest: %w: the peer's key message has %s GID", ErrProtocol, map[bool]string{true: "no", false: "a"}[remote.NoGID])
	}
	if s.Connect != nil {
		if err := s.Connect(remote, mtu); err != nil {
			return remotes, mtu, fmt.Errorf("cm: perftest: connect: %w", err)
		}
	}
	for i := 1; i < plan.PreRunHandshakes; i++ {
		if i == plan.PreRunHandshakes-1 && s.Ready != nil {
			if err := s.Ready(); err != nil {
				return remotes, mtu, fmt.Errorf("cm: perftest: ready: %w", err)
			}
		}
		if _, err := c.HandShake(ctx, s.Local); err != nil {
			return remotes, mtu, err
		}
		if i == plan.KeyLoops[1] {
			if err := loop(ctx); err != nil {
				return remotes, mtu, err
			}
		}
	}
	return remotes, mtu, nil
}

// Finish runs every step after the data phase of test t and closes the connection: for the
// bandwidth tests with reports, a handshake and the report exchange (the client sends its
// measurement, the server sends zeros as perftest's server does with its unfilled report; the
// peer's report is returned), then the closing handshake and "done".
func (c *PerftestConn) Finish(ctx context.Context, t PerftestTest, local PerftestDest, r PerftestReport) (PerftestReport, error) {
	var rem PerftestReport
	if t.Plan().Reports {
		if _, err := c.HandShake(ctx, local); err != nil {
			c.closeConn()
			return rem, err
		}
		var err error
		if rem, err = c.ExchangeReports(ctx, r); err != nil {
			c.closeConn()
			return rem, err
		}
	}
	return rem, c.Close(ctx, local)
}

// closeConn closes the TCP connection (the rdma_cm mode's caller disconnects its own).
func (c *PerftestConn) closeConn() {
	if c.Conn != nil {
		c.Conn.Close()
	}
}

// atof reads a leading decimal number as C's atof does ("6.06" → 6.06, "5.1-rc" → 5.1).
func atof(s string) float64 {
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
		end++
	}
	v, _ := strconv.ParseFloat(s[:end], 64)
	return v
}
