package ktls

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// KernelMode says whether the endpoint installs the session into the kernel's TLS.
type KernelMode int

const (
	// KernelAuto installs into kernel TLS where the kernel has it, else uses the user-space
	// record layer (Conn.Mode says which, and why).
	KernelAuto KernelMode = iota
	// KernelOff always uses the user-space record layer.
	KernelOff
	// KernelRequire fails the connection when kernel TLS cannot take the session.
	KernelRequire
)

// Config configures the endpoint.
type Config struct {
	// Proxy is the path of the proxy's unix socket (`xdproce tls-proxy --socket`).
	Proxy string
	// Timeout bounds the handshake (0: 10 s).
	Timeout time.Duration
	// Kernel chooses the record layer.
	Kernel KernelMode
	// Client only (see Hello): how the proxy verifies the server.
	ServerName  string
	Fingerprint string
	RootCAs     []byte
}

// ErrNotTLS reports a peer whose first bytes are not a TLS handshake record.
var ErrNotTLS = errors.New("ktls: the peer did not start with a TLS handshake record")

// NotTLSError is ErrNotTLS with the connection, whose reads return the bytes Server already
// read first, for a caller that answers such peers in their own protocol.
type NotTLSError struct{ Conn net.Conn }

func (e *NotTLSError) Error() string { return ErrNotTLS.Error() }
func (e *NotTLSError) Unwrap() error { return ErrNotTLS }

type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// Server runs the server side of a TLS 1.3 handshake on nc with the proxy doing the
// cryptography: it relays the peer's records to the proxy one at a time and the proxy's bytes
// to the peer, then takes the session parameters and returns a Conn that moves data itself.
// A failed handshake closes nc, after at most a plaintext alert of its own (the proxy's alerts
// pass as they are), and no application data passes either way. A peer that does not start
// with a handshake record gets *NotTLSError and nc stays open.
func Server(ctx context.Context, nc net.Conn, cfg *Config) (*Conn, error) {
	ctx, cancel, stop := handshakeDeadline(ctx, nc, cfg.Timeout)
	defer cancel()
	defer stop()

	var head [headerLen]byte
	if _, err := io.ReadFull(nc, head[:1]); err != nil {
		nc.Close()
		return nil, fmt.Errorf("ktls: handshake with %v: %w", nc.RemoteAddr(), err)
	}
	if head[0] != typeHandshake {
		stop()
		nc.SetDeadline(time.Time{})
		return nil, &NotTLSError{Conn: &prefixConn{Conn: nc, r: io.MultiReader(bytes.NewReader(head[:1]), nc)}}
	}
	p, err := relay(ctx, nc, head[:1], cfg.Proxy, &Hello{Role: RoleServer})
	return established(nc, p, err, stop, cfg.Kernel, false)
}

// Client runs the client side of a TLS 1.3 handshake on nc with the proxy doing the
// cryptography and verifying the server as cfg says (ServerName, Fingerprint, RootCAs), then
// returns a Conn that moves data itself. The server's NewSessionTicket messages are ignored
// (no resumption). A failed handshake closes nc.
func Client(ctx context.Context, nc net.Conn, cfg *Config) (*Conn, error) {
	ctx, cancel, stop := handshakeDeadline(ctx, nc, cfg.Timeout)
	defer cancel()
	defer stop()
	p, err := relay(ctx, nc, nil, cfg.Proxy, &Hello{Role: RoleClient, ServerName: cfg.ServerName, Fingerprint: cfg.Fingerprint, RootCAs: cfg.RootCAs})
	return established(nc, p, err, stop, cfg.Kernel, true)
}

// established ends a handshake: on err it closes nc; else it lifts the handshake's deadlines
// and builds the Conn for the parameters.
func established(nc net.Conn, p *Params, err error, stop func() bool, mode KernelMode, client bool) (*Conn, error) {
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("ktls: handshake with %v: %w", nc.RemoteAddr(), err)
	}
	stop()
	nc.SetDeadline(time.Time{})
	c, err := newConn(nc, p, mode, client)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// handshakeDeadline bounds the handshake on nc by timeout (0: 10 s) and by ctx; stop lifts
// the ctx watch.
func handshakeDeadline(ctx context.Context, nc net.Conn, timeout time.Duration) (context.Context, context.CancelFunc, func() bool) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	dl, _ := ctx.Deadline()
	nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	return ctx, cancel, stop
}

// relay runs the handshake through the proxy; head holds what was read of the peer's first
// record already.
func relay(ctx context.Context, nc net.Conn, head []byte, path string, hello *Hello) (*Params, error) {
	var d net.Dialer
	pc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		sendPlainAlert(nc, alertInternalError)
		return nil, fmt.Errorf("tls proxy: %w", err)
	}
	defer pc.Close()
	if dl, ok := ctx.Deadline(); ok {
		pc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { pc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := CheckPeer(pc.(*net.UnixConn)); err != nil {
		sendPlainAlert(nc, alertInternalError)
		return nil, fmt.Errorf("tls proxy at %s: %w", path, err)
	}
	hb, err := json.Marshal(hello)
	if err != nil {
		return nil, err
	}
	if err := WriteFrame(pc, FrameHello, hb); err != nil {
		sendPlainAlert(nc, alertInternalError)
		return nil, fmt.Errorf("tls proxy: %w", err)
	}
	rec := make([]byte, headerLen+maxCiphertext)
	have := len(head)
	for {
		typ, payload, err := ReadFrame(pc)
		if err != nil {
			sendPlainAlert(nc, alertInternalError)
			return nil, fmt.Errorf("tls proxy: %w", err)
		}
		switch typ {
		case FrameData:
			if _, err := nc.Write(payload); err != nil {
				return nil, err
			}
		case FrameNeed:
			copy(rec, head[:have])
			n, err := readRecordRaw(nc, rec, have)
			have = 0
			if err != nil {
				var ae *AlertError
				if errors.As(err, &ae) {
					sendPlainAlert(nc, ae.Desc)
				}
				return nil, err
			}
			if err := WriteFrame(pc, FrameRecord, rec[:n]); err != nil {
				sendPlainAlert(nc, alertInternalError)
				return nil, fmt.Errorf("tls proxy: %w", err)
			}
		case FrameParams:
			p, err := UnmarshalParams(payload)
			if err != nil {
				sendPlainAlert(nc, alertInternalError)
			}
			return p, err
		case FrameFail:
			return nil, fmt.Errorf("the proxy failed the handshake: %s", payload)
		default:
			sendPlainAlert(nc, alertInternalError)
			return nil, fmt.Errorf("tls proxy: unknown frame type %q", typ)
		}
	}
}

// readRecordRaw reads one plaintext-framed record (header and body, not decrypted) into rec,
// of which have bytes are already there, and returns its length. The header must look like a
// TLS record: a known content type, a 3.x version, at most maxCiphertext bytes.
func readRecordRaw(nc net.Conn, rec []byte, have int) (int, error) {
	if _, err := io.ReadFull(nc, rec[have:headerLen]); err != nil {
		return 0, err
	}
	if rec[0] < typeChangeCipherSpec || rec[0] > typeApplicationData || rec[1] != 3 {
		return 0, &AlertError{Desc: alertDecodeError, Why: fmt.Sprintf("not a TLS record (% x)", rec[:headerLen])}
	}
	n := int(rec[3])<<8 | int(rec[4])
	if n > maxCiphertext {
		return 0, &AlertError{Desc: alertRecordOverflow, Why: fmt.Sprintf("a record of %d bytes", n)}
	}
	if _, err := io.ReadFull(nc, rec[headerLen:headerLen+n]); err != nil {
		return 0, err
	}
	return headerLen + n, nil
}

// sendPlainAlert sends a fatal alert in a plaintext record (the peer has no keys yet).
func sendPlainAlert(nc net.Conn, desc byte) {
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	nc.Write([]byte{typeAlert, 3, 3, 0, 2, 2, desc})
}

// newConn builds the data-moving Conn: the kernel's record layer when cfg allows and the
// kernel takes the keys, else the user-space one.
func newConn(nc net.Conn, p *Params, mode KernelMode, client bool) (*Conn, error) {
	c := &Conn{nc: nc, suite: p.Suite, client: client}
	if mode != KernelOff {
		kl, err := installKernel(nc, p)
		if err == nil {
			c.rl, c.kernel = kl, true
			c.mode = "kernel TLS (" + SuiteName(p.Suite) + ")"
			return c, nil
		}
		if mode == KernelRequire || !errors.Is(err, ErrNoKernelTLS) {
			return nil, err
		}
		c.mode = fmt.Sprintf("user-space record layer (%s); %v", SuiteName(p.Suite), err)
	} else {
		c.mode = "user-space record layer (" + SuiteName(p.Suite) + "); kernel TLS not tried (off)"
	}
	ul, err := newUserLayer(nc, p)
	if err != nil {
		return nil, err
	}
	c.rl = ul
	return c, nil
}
