package cm

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// xdproce's control protocol, between two xdproce processes.
//
// A connection carries frames: a 4-byte big-endian length, then that many bytes of one JSON
// object, a Message (at most MaxFrame bytes). The first frames are the hello and the
// authentication (hello.go, auth.go). After that the client sends requests (type "request", an Op and an ID) and the server
// answers each with a "reply" or an "error" carrying the same ID. Either side may send
// "event" frames (progress, done) that are not answers. Unknown fields are ignored, so a
// version may add fields; a change that an older peer would misread takes a new
// ProtocolVersion.

// MaxFrame is the largest frame either side accepts.
const MaxFrame = 1 << 20

// Message types.
const (
	TypeHello   = "hello"
	TypeRequest = "request"
	TypeReply   = "reply"
	TypeError   = "error"
	TypeEvent   = "event"
)

// Message is one frame of the control protocol. Only the fields an operation needs are set;
// empty ones are left out of the JSON.
type Message struct {
	Type    string `json:"type"`
	ID      uint64 `json:"id,omitempty"`      // request ID, echoed by its reply or error
	Proto   string `json:"proto,omitempty"`   // hello
	Version int    `json:"version,omitempty"` // hello
	Op      string `json:"op,omitempty"`      // operation kind: "send", "get", "bench", ...
	Error   string `json:"error,omitempty"`   // error frames: what went wrong

	// The queue pair and path.
	QPN    uint32 `json:"qpn,omitempty"`
	PSN    uint32 `json:"psn,omitempty"`
	GID    *GID   `json:"gid,omitempty"`
	MTU    int    `json:"mtu,omitempty"`     // bytes (256 … 4096)
	QPType string `json:"qp_type,omitempty"` // "RC", "UC", "UD"
	QKey   uint32 `json:"qkey,omitempty"`    // UD
	// Extra queue pairs (bench --qps N); the first is in QPN/PSN.
	QPs []QPInfo `json:"qps,omitempty"`

	// Memory the peer may access.
	Regions []Region `json:"regions,omitempty"`

	// Files and benchmarks.
	Name   string `json:"name,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	SHA256 string `json:"sha256,omitempty"` // hex
	Iters  int64  `json:"iters,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"` // progress events: bytes moved so far

	// Anything else an operation needs, as text.
	Params map[string]string `json:"params,omitempty"`

	// The hello's capability exchange and authentication (hello.go, auth.go).
	Caps  []string `json:"caps,omitempty"`  // capabilities the sender has
	Auth  string   `json:"auth,omitempty"`  // server hello: how it authenticates clients
	Nonce string   `json:"nonce,omitempty"` // hex, fresh per hello
	MAC   string   `json:"mac,omitempty"`   // hex HMAC proving the pre-shared key
}

// QPInfo describes one queue pair.
type QPInfo struct {
	QPN uint32 `json:"qpn"`
	PSN uint32 `json:"psn"`
}

// Region is registered memory the peer may RDMA WRITE to, READ from or run atomics on.
type Region struct {
	Addr uint64 `json:"addr"`
	RKey uint32 `json:"rkey"`
	Len  uint64 `json:"len"`
}

// Conn is one control connection. Send, Recv and Call may be used from different goroutines
// (one sender at a time is serialised, Recv must have one caller at a time).
type Conn struct {
	nc      net.Conn
	r       *bufio.Reader
	wmu     sync.Mutex
	idmu    sync.Mutex
	nextID  uint64
	rbuf    []byte
	timeout time.Duration
	peer    []string // the peer's capabilities, from its hello
}

func newConn(nc net.Conn, timeout time.Duration) *Conn {
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	return &Conn{nc: nc, r: bufio.NewReader(nc), timeout: timeout}
}

// NetConn is the underlying connection (a *tls.Conn with TLS).
func (c *Conn) NetConn() net.Conn { return c.nc }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr is this side's address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// Send writes one message.
func (c *Conn) Send(ctx context.Context, m *Message) error {
	return cmErr(c.send(ctx, m, m.Type))
}

// SendValue writes any JSON-encodable value as one frame. With RecvValue it lets a caller run
// its own messages over a connection Dial or Accept set up (TLS, retries, hello). Mixing it with
// Call on the same connection is the caller's business.
func (c *Conn) SendValue(ctx context.Context, v any) error {
	return cmErr(c.send(ctx, v, fmt.Sprintf("%T", v)))
}

// cmErr puts the package's name before err (nil and io.EOF stay as they are).
// The unexported send and receive functions return errors without it, so that
// the hello exchange can add its own context once.
func cmErr(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return fmt.Errorf("cm: %w", err)
}

func (c *Conn) send(ctx context.Context, v any, what string) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", what, err)
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("%s message of %d bytes is over the %d-byte frame limit", what, len(b), MaxFrame)
	}
	frame := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[4:], b)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	stop := context.AfterFunc(ctx, func() { c.nc.SetWriteDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			c.nc.SetWriteDeadline(time.Time{})
		}
	}()
	if _, err := c.nc.Write(frame); err != nil {
		return ctxErr(ctx, fmt.Errorf("send %s to %v: %w", what, c.nc.RemoteAddr(), err))
	}
	return nil
}

// Recv reads one message; it blocks until one arrives, the peer closes (io.EOF), or ctx ends.
// Error frames are returned as messages; Call turns them into errors.
func (c *Conn) Recv(ctx context.Context) (*Message, error) {
	m, err := c.recv(ctx)
	return m, cmErr(err)
}

func (c *Conn) recv(ctx context.Context) (*Message, error) {
	m := new(Message)
	if err := c.recvValue(ctx, m); err != nil {
		return nil, err
	}
	if m.Type == "" {
		return nil, fmt.Errorf("receive from %v: %w: message without type", c.nc.RemoteAddr(), ErrProtocol)
	}
	return m, nil
}

// RecvValue reads one frame and decodes its JSON into v (see SendValue). It returns io.EOF
// when the peer closed the connection between frames.
func (c *Conn) RecvValue(ctx context.Context, v any) error {
	return cmErr(c.recvValue(ctx, v))
}

func (c *Conn) recvValue(ctx context.Context, v any) error {
	stop := context.AfterFunc(ctx, func() { c.nc.SetReadDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			c.nc.SetReadDeadline(time.Time{})
		}
	}()
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) && ctx.Err() == nil {
			return io.EOF
		}
		return ctxErr(ctx, fmt.Errorf("receive from %v: %w", c.nc.RemoteAddr(), eofProtocol(err)))
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		if why := notControl(hdr[:]); why != "" {
			return fmt.Errorf("receive from %v: %w: %s", c.nc.RemoteAddr(), ErrProtocol, why)
		}
		return fmt.Errorf("receive from %v: %w: frame of %d bytes (limit %d; is the peer xdproce?)", c.nc.RemoteAddr(), ErrProtocol, n, MaxFrame)
	}
	if cap(c.rbuf) < int(n) {
		c.rbuf = make([]byte, n)
	}
	b := c.rbuf[:n]
	if _, err := io.ReadFull(c.r, b); err != nil {
		return ctxErr(ctx, fmt.Errorf("receive from %v: %w", c.nc.RemoteAddr(), eofProtocol(err)))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("receive from %v: %w: %v", c.nc.RemoteAddr(), ErrProtocol, err)
	}
	return nil
}

// Call sends req as a request with a fresh ID and returns the reply with that ID. Event frames
// that arrive first are handed to onEvent (dropped when it is nil). An error frame becomes an
// error wrapping ErrRemote with the peer's text.
func (c *Conn) Call(ctx context.Context, req *Message, onEvent func(*Message)) (*Message, error) {
	c.idmu.Lock()
	c.nextID++
	id := c.nextID
	c.idmu.Unlock()
	r := *req
	r.Type, r.ID = TypeRequest, id
	if err := c.Send(ctx, &r); err != nil {
		return nil, err
	}
	for {
		m, err := c.Recv(ctx)
		if err == io.EOF {
			return nil, fmt.Errorf("cm: %s: %w: peer closed the connection before answering", req.Op, ErrProtocol)
		}
		if err != nil {
			return nil, err
		}
		switch {
		case m.Type == TypeEvent:
			if onEvent != nil {
				onEvent(m)
			}
		case m.Type == TypeError && (m.ID == id || m.ID == 0):
			return m, fmt.Errorf("cm: %s: %w: %s", req.Op, ErrRemote, m.Error)
		case m.Type == TypeReply && m.ID == id:
			return m, nil
		default:
			return m, fmt.Errorf("cm: %s: %w: unexpected %s message (id %d) while waiting for reply %d", req.Op, ErrProtocol, m.Type, m.ID, id)
		}
	}
}

// Reply answers req with resp (its Type and ID are set here).
func (c *Conn) Reply(ctx context.Context, req, resp *Message) error {
	r := *resp
	r.Type, r.ID = TypeReply, req.ID
	if r.Op == "" {
		r.Op = req.Op
	}
	return c.Send(ctx, &r)
}

// ReplyError answers req (nil: no particular request) with an error frame carrying err's text.
func (c *Conn) ReplyError(ctx context.Context, req *Message, err error) error {
	m := &Message{Type: TypeError, Error: err.Error()}
	if req != nil {
		m.ID, m.Op = req.ID, req.Op
	}
	return c.Send(ctx, m)
}
