package xfer

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// DefaultPort is the TCP port of the control connection (that of rdma-core's
// pingpong tools and perftest).
const DefaultPort = 18515

// ProtocolVersion is the version of the control protocol; both sides must
// speak the same.
const ProtocolVersion = 1

// maxMessage bounds one control message.
const maxMessage = 1 << 20

// Message types.
const (
	msgPut    = "put"    // client → server: store NAME (Size bytes) written by RDMA WRITE
	msgGet    = "get"    // client → server: send NAME by RDMA READ
	msgBench  = "bench"  // client → server: a benchmark
	msgAccept = "accept" // server → client: the server's QP and staging buffer
	msgData   = "data"   // a slot holds Len bytes of the content at Off
	msgFree   = "free"   // the slot may be reused
	msgEnd    = "end"    // all content sent; SHA256 of it
	msgOK     = "ok"     // the receiver verified the content
	msgError  = "error"  // the peer gives up; Error says why
)

// message is one control message. Fields unused by a type are left zero.
type message struct {
	Type    string `json:"type"`
	Version int    `json:"version,omitempty"`
	Name    string `json:"name,omitempty"`
	Size    int64  `json:"size,omitempty"`

	// Queue pair and path.
	QPN     uint32 `json:"qpn,omitempty"`
	PSN     uint32 `json:"psn,omitempty"`
	GID     string `json:"gid,omitempty"`
	PathMTU int    `json:"path_mtu,omitempty"`
	Link    string `json:"link,omitempty"`

	// Staging buffer (accept).
	Addr     uint64 `json:"addr,omitempty"`
	RKey     uint32 `json:"rkey,omitempty"`
	SlotSize int    `json:"slot_size,omitempty"`
	Slots    int    `json:"slots,omitempty"`

	// Slot traffic (data, free).
	Slot int   `json:"slot,omitempty"`
	Off  int64 `json:"off,omitempty"`
	Len  int   `json:"len,omitempty"`

	SHA256 string `json:"sha256,omitempty"`
	Error  string `json:"error,omitempty"`

	// Benchmarks.
	Bench *BenchParams `json:"bench,omitempty"`
}

// ctrl is a control connection: messages are read by one goroutine and
// written under a lock.
type ctrl struct {
	c  net.Conn
	r  *bufio.Reader
	mu sync.Mutex
	wb []byte
}

func newCtrl(c net.Conn) *ctrl { return &ctrl{c: c, r: bufio.NewReader(c)} }

func (c *ctrl) send(m *message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wb = binary.BigEndian.AppendUint32(c.wb[:0], uint32(len(b)))
	c.wb = append(c.wb, b...)
	if _, err := c.c.Write(c.wb); err != nil {
		return fmt.Errorf("control connection: %w", err)
	}
	return nil
}

// errPeerClosed: the control connection ended where a message was due.
var errPeerClosed = errors.New("peer closed the control connection")

func (c *ctrl) recv(m *message) error {
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return errPeerClosed
		}
		return fmt.Errorf("control connection: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxMessage {
		return fmt.Errorf("control connection: message of %d bytes (at most %d)", n, maxMessage)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return errPeerClosed
		}
		return fmt.Errorf("control connection: %w", err)
	}
	*m = message{}
	if err := json.Unmarshal(b, m); err != nil {
		return fmt.Errorf("control connection: bad message: %w", err)
	}
	return nil
}

// expect reads one message and checks its type; an error message from the
// peer becomes an error.
func (c *ctrl) expect(m *message, typ string) error {
	if err := c.recv(m); err != nil {
		return err
	}
	if m.Type == msgError {
		return &RemoteError{Msg: m.Error}
	}
	if m.Type != typ {
		return fmt.Errorf("control connection: got %q, want %q", m.Type, typ)
	}
	return nil
}

func (c *ctrl) close() error { return c.c.Close() }

// A RemoteError is an error the peer reported over the control connection.
type RemoteError struct{ Msg string }

func (e *RemoteError) Error() string { return "peer: " + e.Msg }

// HostPort adds DefaultPort to host when it has no port ("198.51.100.1",
// "2001:db8::1", "[2001:db8::1]:9000", "host:9000").
func HostPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(a, DefaultPort).String()
	}
	return net.JoinHostPort(host, strconv.Itoa(DefaultPort))
}

// Dial connects to the control port at addr (host or host:port), retrying
// with backoff for up to retry, since a server may still be starting. The
// error names the address and how long it tried.
func Dial(ctx context.Context, addr string, retry time.Duration) (net.Conn, error) {
	addr = HostPort(addr)
	start := time.Now()
	deadline := start.Add(retry)
	backoff := 50 * time.Millisecond
	var d net.Dialer
	for {
		dctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect %s: %w", addr, ctx.Err())
		}
		if time.Now().Add(backoff).After(deadline) {
			return nil, fmt.Errorf("connect %s (tried for %v): %w", addr, time.Since(start).Round(100*time.Millisecond), err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, fmt.Errorf("connect %s: %w", addr, ctx.Err())
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}
