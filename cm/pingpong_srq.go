package cm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
)

// SRQPingpongMsgs is the number of address messages ibv_srq_pingpong sends each way: one per
// possible queue pair (its MAX_QP), whatever -q says; those past the queue pairs in use carry
// zeros ("0000:000000:000000:" and 32 zero digits).
const SRQPingpongMsgs = 256

// marshalDests returns the SRQPingpongMsgs messages of locals, zero-padded.
func marshalDests(locals []PingpongDest) ([]byte, error) {
	if len(locals) > SRQPingpongMsgs {
		return nil, fmt.Errorf("cm: srq pingpong: %d queue pairs, at most %d", len(locals), SRQPingpongMsgs)
	}
	b := make([]byte, 0, SRQPingpongMsgs*PingpongMsgLen)
	for i := range SRQPingpongMsgs {
		var d PingpongDest
		if i < len(locals) {
			d = locals[i]
		}
		var err error
		if b, err = d.AppendMarshal(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// readDests reads the SRQPingpongMsgs messages of the peer and returns the first n.
func readDests(ctx context.Context, conn net.Conn, n int, who string) ([]PingpongDest, error) {
	buf := make([]byte, SRQPingpongMsgs*PingpongMsgLen)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("cm: srq pingpong: read %s addresses: %w", who, eofProtocol(err)))
	}
	ds := make([]PingpongDest, n)
	for i := range ds {
		d, err := UnmarshalPingpongDest(buf[i*PingpongMsgLen : (i+1)*PingpongMsgLen])
		if err != nil {
			return nil, fmt.Errorf("srq pingpong: address %d: %w", i, err)
		}
		ds[i] = d
	}
	return ds, nil
}

// DialSRQPingpong runs the client side of ibv_srq_pingpong's exchange on conn: it sends the
// addresses of its queue pairs (SRQPingpongMsgs messages), reads the server's and sends
// "done". It returns the server's first len(locals) addresses.
func DialSRQPingpong(ctx context.Context, conn net.Conn, locals []PingpongDest) ([]PingpongDest, error) {
	defer watchContext(ctx, conn)()
	msg, err := marshalDests(locals)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(msg); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("cm: srq pingpong: send addresses: %w", err))
	}
	remotes, err := readDests(ctx, conn, len(locals), "server")
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(pingpongDone); err != nil {
		return remotes, ctxErr(ctx, fmt.Errorf("cm: srq pingpong: send done: %w", err))
	}
	return remotes, nil
}

// ServeSRQPingpong runs the server side of ibv_srq_pingpong's exchange on an accepted conn: it
// reads the client's SRQPingpongMsgs addresses, calls connect with the first len(locals) (move
// the queue pairs to RTS there), sends its own and waits for "done".
func ServeSRQPingpong(ctx context.Context, conn net.Conn, locals []PingpongDest, connect func(remotes []PingpongDest) error) ([]PingpongDest, error) {
	defer watchContext(ctx, conn)()
	msg, err := marshalDests(locals)
	if err != nil {
		return nil, err
	}
	remotes, err := readDests(ctx, conn, len(locals), "client")
	if err != nil {
		return nil, err
	}
	if connect != nil {
		if err := connect(remotes); err != nil {
			return remotes, fmt.Errorf("cm: srq pingpong: connect: %w", err)
		}
	}
	if _, err := conn.Write(msg); err != nil {
		return remotes, ctxErr(ctx, fmt.Errorf("cm: srq pingpong: send addresses: %w", err))
	}
	done := make([]byte, len(pingpongDone))
	if _, err := io.ReadFull(conn, done); err != nil {
		return remotes, ctxErr(ctx, fmt.Errorf("cm: srq pingpong: read done: %w", eofProtocol(err)))
	}
	if !bytes.Equal(done, pingpongDone) {
		return remotes, fmt.Errorf("cm: srq pingpong: %w: want \"done\\x00\", got %q", ErrProtocol, done)
	}
	return remotes, nil
}
