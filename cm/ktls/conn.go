package ktls

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// recordLayer moves records on the connection to the peer: the user-space one (userLayer)
// or the kernel's (kernel_linux.go).
type recordLayer interface {
	// readRecord returns the next record's content type and content (valid until the next
	// call), decrypted.
	readRecord() (typ byte, content []byte, err error)
	// writeRecord sends content (at most maxPlaintext bytes) as one record of type typ.
	writeRecord(typ byte, content []byte) error
}

// Conn is a TLS 1.3 connection whose handshake ran in the proxy: a net.Conn that encrypts
// what is written and decrypts what is read, with the kernel's record layer or its own.
type Conn struct {
	nc     net.Conn
	rl     recordLayer
	suite  uint16
	kernel bool
	client bool // ignores the server's NewSessionTicket messages
	mode   string

	rmu     sync.Mutex
	pending []byte
	rerr    error

	wmu  sync.Mutex
	werr error

	closeOnce sync.Once
	closeErr  error
}

var errClosed = errors.New("ktls: use of closed connection")

// Read reads application data. It returns io.EOF after the peer's close_notify; any other
// alert, a record that fails authentication or a post-handshake handshake message (a
// KeyUpdate included: this endpoint does not rekey) ends the connection with an error, and
// for the last ones the endpoint sends the matching alert first.
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.pending) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		typ, content, err := c.rl.readRecord()
		if err == nil {
			err = c.handle(typ, content)
		}
		if err != nil {
			c.fail(err)
			c.rerr = err
		}
	}
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// handle takes one decrypted record: data becomes pending, an alert ends reading.
func (c *Conn) handle(typ byte, content []byte) error {
	switch typ {
	case typeApplicationData:
		c.pending = content // may be empty: zero-length data records are allowed
		return nil
	case typeAlert:
		if len(content) != 2 {
			return &AlertError{Desc: alertDecodeError, Why: fmt.Sprintf("an alert of %d bytes", len(content))}
		}
		if content[1] == alertCloseNotify {
			return io.EOF
		}
		return &AlertError{Desc: content[1], Remote: true}
	case typeHandshake:
		return c.postHandshake(content)
	}
	return &AlertError{Desc: alertUnexpectedMessage, Why: fmt.Sprintf("a record of content type %d", typ)}
}

// Handshake message types that may follow the handshake (RFC 8446 §4).
const (
	msgNewSessionTicket byte = 4
	msgKeyUpdate        byte = 24
)

// postHandshake takes the handshake messages of one record after the handshake: a client
// skips NewSessionTicket (it never resumes); a KeyUpdate, or anything else, ends the
// connection with unexpected_message (this endpoint does not rekey).
func (c *Conn) postHandshake(b []byte) error {
	if len(b) == 0 {
		return &AlertError{Desc: alertUnexpectedMessage, Why: "an empty handshake record"}
	}
	for len(b) > 0 {
		if len(b) < 4 {
			return &AlertError{Desc: alertDecodeError, Why: "a handshake message cut short"}
		}
		n := 4 + (int(b[1])<<16 | int(b[2])<<8 | int(b[3]))
		switch {
		case b[0] == msgKeyUpdate:
			return &AlertError{Desc: alertUnexpectedMessage, Why: "the peer sent a KeyUpdate, and this endpoint does not rekey"}
		case b[0] != msgNewSessionTicket || !c.client:
			return &AlertError{Desc: alertUnexpectedMessage, Why: fmt.Sprintf("handshake message %d after the handshake", b[0])}
		case n > len(b):
			// A ticket split across records: this endpoint keeps no handshake buffer.
			return &AlertError{Desc: alertUnexpectedMessage, Why: "a NewSessionTicket split across records"}
		}
		b = b[n:]
	}
	return nil
}

// fail sends the alert a local error calls for and stops writing.
func (c *Conn) fail(err error) {
	var ae *AlertError
	if !errors.As(err, &ae) || ae.Remote {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr == nil {
		c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		c.rl.writeRecord(typeAlert, []byte{2, ae.Desc})
		c.werr = err
	}
}

// Write sends b as application data records of at most 16 KiB each.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for c.werr == nil && n < len(b) {
		chunk := b[n:min(len(b), n+maxPlaintext)]
		if err := c.rl.writeRecord(typeApplicationData, chunk); err != nil {
			c.werr = err
			break
		}
		n += len(chunk)
	}
	if n < len(b) {
		return n, c.werr
	}
	return n, nil
}

// Close sends close_notify (waiting at most a second for room to) and closes the connection.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.wmu.Lock()
		if c.werr == nil {
			c.nc.SetWriteDeadline(time.Now().Add(time.Second))
			c.rl.writeRecord(typeAlert, []byte{1, alertCloseNotify})
			c.werr = errClosed
		}
		c.wmu.Unlock()
		c.closeErr = c.nc.Close()
	})
	return c.closeErr
}

// Suite is the negotiated cipher suite (TLS_AES_128_GCM_SHA256 or TLS_AES_256_GCM_SHA384).
func (c *Conn) Suite() uint16 { return c.suite }

// Kernel reports whether the kernel's TLS record layer moves the data.
func (c *Conn) Kernel() bool { return c.kernel }

// Mode says which record layer moves the data and, for the user-space one, why not the
// kernel's.
func (c *Conn) Mode() string { return c.mode }

// NetConn is the underlying TCP connection.
func (c *Conn) NetConn() net.Conn { return c.nc }

func (c *Conn) LocalAddr() net.Addr                { return c.nc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr               { return c.nc.RemoteAddr() }
func (c *Conn) SetDeadline(t time.Time) error      { return c.nc.SetDeadline(t) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.nc.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.nc.SetWriteDeadline(t) }

// userLayer is the record layer in user space: AES-GCM from the standard library over the
// TCP connection, reading exactly one record at a time.
type userLayer struct {
	nc      net.Conn
	in, out *halfConn
	rbuf    []byte
	wbuf    []byte
}

func newUserLayer(nc net.Conn, p *Params) (*userLayer, error) {
	in, err := newHalf(p.Suite, p.Rx)
	if err != nil {
		return nil, err
	}
	out, err := newHalf(p.Suite, p.Tx)
	if err != nil {
		return nil, err
	}
	return &userLayer{nc: nc, in: in, out: out,
		rbuf: make([]byte, headerLen+maxCiphertext), wbuf: make([]byte, headerLen+maxPlaintext+1+tagLen)}, nil
}

func (u *userLayer) readRecord() (byte, []byte, error) {
	h := u.rbuf[:headerLen]
	if _, err := io.ReadFull(u.nc, h); err != nil {
		return 0, nil, truncated(err)
	}
	n := int(h[3])<<8 | int(h[4])
	switch {
	case h[0] != typeApplicationData:
		return 0, nil, &AlertError{Desc: alertUnexpectedMessage, Why: fmt.Sprintf("an unprotected record of type %d after the handshake", h[0])}
	case n > maxCiphertext:
		return 0, nil, &AlertError{Desc: alertRecordOverflow, Why: fmt.Sprintf("a record of %d bytes", n)}
	case n < tagLen+1:
		return 0, nil, &AlertError{Desc: alertDecodeError, Why: fmt.Sprintf("a record of %d bytes, too short for AES-GCM", n)}
	}
	rec := u.rbuf[:headerLen+n]
	if _, err := io.ReadFull(u.nc, rec[headerLen:]); err != nil {
		return 0, nil, truncated(err)
	}
	return u.in.open(rec)
}

// truncated names a TCP end without close_notify.
func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("ktls: the peer closed the connection without close_notify: %w", io.ErrUnexpectedEOF)
	}
	return err
}

func (u *userLayer) writeRecord(typ byte, content []byte) error {
	n := copy(u.wbuf[headerLen:], content)
	u.wbuf[headerLen+n] = typ
	rec, err := u.out.seal(u.wbuf, n+1)
	if err != nil {
		return err
	}
	_, err = u.nc.Write(rec)
	return err
}
