package cm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// DefaultPort is the TCP port of the out-of-band exchange of rdma-core's pingpong tools, of
// perftest and of xdproce's control protocol.
const DefaultPort = 18515

// PingpongMsgLen is the length of one pingpong address message, the NUL included:
// "LLLL:QQQQQQ:PPPPPP:" and 32 hex digits of GID.
const PingpongMsgLen = 52

// pingpongDone is what the client sends after reading the server's address.
var pingpongDone = []byte("done\x00")

// PingpongDest is what one side of ibv_rc_pingpong, ibv_uc_pingpong or ibv_ud_pingpong tells
// the other: its LID (0 on RoCE), QP number, first PSN and GID.
type PingpongDest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID GID
}

// String gives the line the pingpong tools print, e.g.
// "LID 0x0000, QPN 0x000011, PSN 0x0e1221, GID ::ffff:192.0.2.11".
func (d PingpongDest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", d.LID, d.QPN, d.PSN, d.GID)
}

// AppendMarshal appends the 52-byte wire form, "%04x:%06x:%06x:%s" and a NUL. rdma-core prints
// the GID as four htobe32 words, which on every little-endian host is the 16 bytes in order.
func (d PingpongDest) AppendMarshal(b []byte) ([]byte, error) {
	if d.QPN > 0xffffff || d.PSN > 0xffffff {
		return b, fmt.Errorf("cm: pingpong address: QPN 0x%x or PSN 0x%x over 24 bits", d.QPN, d.PSN)
	}
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN), 6)
	b = append(b, ':')
	b = append(b, d.GID.Hex()...)
	return append(b, 0), nil
}

// Marshal returns the 52-byte wire form.
func (d PingpongDest) Marshal() ([]byte, error) {
	return d.AppendMarshal(make([]byte, 0, PingpongMsgLen))
}

// UnmarshalPingpongDest parses one pingpong address message (52 bytes, or the text without its
// NUL). Like rdma-core's sscanf it takes hex fields separated by ':'; it refuses anything else.
func UnmarshalPingpongDest(b []byte) (PingpongDest, error) {
	var d PingpongDest
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	f := bytes.Split(b, []byte{':'})
	if len(f) != 4 || len(f[0]) != 4 || len(f[1]) != 6 || len(f[2]) != 6 {
		return d, fmt.Errorf("cm: pingpong address %q: %w: want LLLL:QQQQQQ:PPPPPP:GID", b, ErrProtocol)
	}
	lid, err1 := strconv.ParseUint(string(f[0]), 16, 16)
	qpn, err2 := strconv.ParseUint(string(f[1]), 16, 24)
	psn, err3 := strconv.ParseUint(string(f[2]), 16, 24)
	if err := errors.Join(err1, err2, err3); err != nil {
		return d, fmt.Errorf("cm: pingpong address %q: %w: bad hex field", b, ErrProtocol)
	}
	g, err := ParseGIDHex(string(f[3]))
	if err != nil {
		return d, fmt.Errorf("cm: pingpong address %q: %w: bad gid", b, ErrProtocol)
	}
	d.LID, d.QPN, d.PSN, d.GID = uint16(lid), uint32(qpn), uint32(psn), g
	return d, nil
}

// DialPingpong runs the client side of the pingpong exchange on conn: it sends local, reads
// the server's address and sends "done". The server has moved its QP to RTR before it answers,
// so the client may send as soon as its own QP is ready. On a connection wrapped by a
// Negotiation, an xdproce server answers with a hello instead and the agreement is returned
// (*AgreedError or the refusal; see negotiate.go).
func DialPingpong(ctx context.Context, conn net.Conn, local PingpongDest) (PingpongDest, error) {
	defer watchContext(ctx, conn)()
	msg, err := local.Marshal()
	if err != nil {
		return PingpongDest{}, err
	}
	if _, err := conn.Write(msg); err != nil {
		return PingpongDest{}, ctxErr(ctx, fmt.Errorf("cm: pingpong: send address: %w", err))
	}
	buf := make([]byte, PingpongMsgLen)
	if _, err := io.ReadFull(conn, buf); err != nil {
		if controlFrameStart(buf) {
			return PingpongDest{}, controlPeerErr("pingpong: read server address")
		}
		return PingpongDest{}, ctxErr(ctx, fmt.Errorf("cm: pingpong: read server address: %w", eofProtocol(err)))
	}
	if controlFrameStart(buf) {
		return PingpongDest{}, controlPeerErr("pingpong: read server address")
	}
	n := negotiation(conn)
	if n != nil && isBenchHello(buf) {
		return PingpongDest{}, n.askServer(ctx, conn, buf)
	}
	remote, err := UnmarshalPingpongDest(buf)
	if err != nil {
		return PingpongDest{}, err
	}
	if n != nil && n.Stock != nil {
		if err := n.Stock(); err != nil {
			return remote, err
		}
	}
	if _, err := conn.Write(pingpongDone); err != nil {
		return remote, ctxErr(ctx, fmt.Errorf("cm: pingpong: send done: %w", err))
	}
	return remote, nil
}

// ServePingpong runs the server side of the pingpong exchange on an accepted conn: it reads the
// client's address, calls connect (move the QP to RTR/RTS there; an error aborts the exchange
// and closes nothing), sends local and waits for the client's "done". On a connection wrapped by
// a Negotiation, a client whose PSN is its tag gets a hello instead and the agreement is
// returned before connect runs.
func ServePingpong(ctx context.Context, conn net.Conn, local PingpongDest, connect func(remote PingpongDest) error) (PingpongDest, error) {
	defer watchContext(ctx, conn)()
	buf := make([]byte, PingpongMsgLen)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return PingpongDest{}, ctxErr(ctx, fmt.Errorf("cm: pingpong: read client address: %w", eofProtocol(err)))
	}
	remote, err := UnmarshalPingpongDest(buf)
	if err != nil {
		return PingpongDest{}, err
	}
	if n := negotiation(conn); n != nil {
		tagged := remote.PSN == TagPSN(remote.QPN, remote.GID, 0, 0)
		if handled, err := n.answerClient(ctx, conn, tagged, PingpongMsgLen); handled || err != nil {
			return remote, err
		}
	}
	if connect != nil {
		if err := connect(remote); err != nil {
			return remote, fmt.Errorf("cm: pingpong: connect: %w", err)
		}
	}
	msg, err := local.Marshal()
	if err != nil {
		return remote, err
	}
	if _, err := conn.Write(msg); err != nil {
		return remote, ctxErr(ctx, fmt.Errorf("cm: pingpong: send address: %w", err))
	}
	done := make([]byte, len(pingpongDone))
	if _, err := io.ReadFull(conn, done); err != nil {
		return remote, ctxErr(ctx, fmt.Errorf("cm: pingpong: read done: %w", eofProtocol(err)))
	}
	if !bytes.Equal(done, pingpongDone) {
		return remote, fmt.Errorf("cm: pingpong: %w: want \"done\\x00\", got %q", ErrProtocol, done)
	}
	return remote, nil
}

func appendHex(b []byte, v uint64, width int) []byte {
	const digits = "0123456789abcdef"
	for i := width - 1; i >= 0; i-- {
		b = append(b, digits[(v>>(4*uint(i)))&0xf])
	}
	return b
}

// watchContext makes blocking I/O on conn return when ctx ends, by moving its deadline into
// the past; the returned function stops watching and clears the deadline.
func watchContext(ctx context.Context, conn net.Conn) func() {
	if ctx.Done() == nil {
		return func() {}
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		if !stop() {
			conn.SetDeadline(time.Time{})
		}
	}
}

// ctxErr prefers the context's error when the context ended the I/O.
func ctxErr(ctx context.Context, err error) error {
	if ce := ctx.Err(); ce != nil {
		return fmt.Errorf("%w: %w", err, ce)
	}
	return err
}

// eofProtocol turns a peer closing mid-message into a protocol error that says so.
func eofProtocol(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: peer closed the connection mid-exchange", ErrProtocol)
	}
	return err
}
