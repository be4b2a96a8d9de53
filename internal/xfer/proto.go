package xfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/xdproce/xdproce/cm"
)

// DefaultPort is the TCP port of the control connection (cm.DefaultPort).
const DefaultPort = cm.DefaultPort

// ProtocolVersion is the version of this package's messages, carried in
// requests on top of cm's own hello; both sides must speak the same.
const ProtocolVersion = 1

// Message types.
const (
	msgPut = "put" // client → server: store NAME (Size bytes) written by RDMA WRITE
	// msgPutEnlarge (enlarge_put.go): store NAME sent through an enlargement channel
	msgGet = "get" // client → server: send NAME by RDMA READ
	// msgPutOOO, msgGetOOO (ooo.go): as put and get, by OOO WRITE and READ
	// msgPutLMRM, msgGetLMRM (lmrm.go): as put and get, on an lmrm pool
	// msgGetEnlarge, msgReady (enlarge_get.go): send NAME through an enlargement channel
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
	// Force (put): replace an existing file, if the server allows it.
	Force bool `json:"force,omitempty"`

	// Queue pair and path.
	QPN     uint32 `json:"qpn,omitempty"`
	PSN     uint32 `json:"psn,omitempty"`
	GID     string `json:"gid,omitempty"`
	PathMTU int    `json:"path_mtu,omitempty"`
	Link    string `json:"link,omitempty"`
	// Reliability "sr": the sender's RC queue pair does selective repeat
	// (docs/sr-wire.md) if the other side's says "sr" too; a client offers
	// it, the server's accept says what both then use. Empty (an xdproce
	// without it, or --reliability gbn): go-back-N.
	Reliability string `json:"reliability,omitempty"`
	// SRWindow, with Reliability "sr": how many PSNs past a hole this
	// side's responder holds (roce.SRHold), which caps the peer's send
	// window. Absent (an xdproce with the first SR_SACK format): 256.
	SRWindow int `json:"sr_window,omitempty"`
	// CC "dcqcn": the RC queue pair runs DCQCN (docs/cc.md) if the other
	// side's says "dcqcn" too, agreed as Reliability. Empty (an xdproce
	// without it, or --cc none): no congestion control.
	CC string `json:"cc,omitempty"`

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

	// OOO mode (put_ooo, get_ooo accepts): the server's contexts, each an
	// id and key (roce.Ctx), for the client's operations.
	Ctxs []uint32 `json:"ctxs,omitempty"`
	// put_ooo accepts: the context for the client's commit record and the
	// record's offset in the staging buffer (ooo_commit.go).
	CommitCtx uint32 `json:"commit_ctx,omitempty"`
	CommitOff int64  `json:"commit_off,omitempty"`

	// Enlargement channel (put_enlarge, get_enlarge and their accepts).
	Channel *channelInfo `json:"channel,omitempty"`

	// Part of a file (get, cm.CapRange; span.go): asked for in the request,
	// resolved in the accept, the file's size in a range refusal.
	Span *Span `json:"span,omitempty"`
	// Code classifies an error message for the client (span.go).
	Code string `json:"code,omitempty"`
}

// ctrl carries this package's messages over a cm control connection (which
// did TLS and the versioned hello). Messages are read by one goroutine at a
// time; cm serialises writers. ctx bounds every read and write: cancelling
// it unblocks them.
type ctrl struct {
	c   *cm.Conn
	ctx context.Context
}

func newCtrl(ctx context.Context, c *cm.Conn) *ctrl { return &ctrl{c: c, ctx: ctx} }

func (c *ctrl) send(m *message) error {
	if err := c.c.SendValue(c.ctx, m); err != nil {
		return fmt.Errorf("control connection: %w", peerGone(err))
	}
	return nil
}

// errPeerClosed: the control connection ended where a message was due.
var errPeerClosed = errors.New("peer closed the control connection")

// peerGone maps the ways a dead peer shows up to errPeerClosed.
func peerGone(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, cm.ErrProtocol) && strings.Contains(err.Error(), "peer closed") {
		return errPeerClosed
	}
	return err
}

func (c *ctrl) recv(m *message) error {
	*m = message{}
	if err := c.c.RecvValue(c.ctx, m); err != nil {
		if err = peerGone(err); err == errPeerClosed {
			return err
		}
		return fmt.Errorf("control connection: %w", err)
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
		return remoteError(m)
	}
	if m.Type != typ {
		return fmt.Errorf("control connection: got %q, want %q", m.Type, typ)
	}
	return nil
}

func (c *ctrl) close() error { return c.c.Close() }

// A RemoteError is an error the peer reported over the control connection.
// Code, when the peer gave one, says what kind (span.go): errors.Is
// matches fs.ErrNotExist, ErrExists and ErrRange by it; Size is the file's
// size with ErrRange.
type RemoteError struct {
	Msg  string
	Code string
	Size int64
}

func (e *RemoteError) Error() string { return "peer: " + e.Msg }
