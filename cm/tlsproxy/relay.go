package tlsproxy

import (
	"fmt"
	"net"
	"time"

	"github.com/xdproce/xdproce/cm/ktls"
)

// relayConn is the net.Conn crypto/tls runs over: its reads are the peer's records the
// endpoint relays, one record per Read, asked for only when crypto/tls wants more (so it never
// reads past the client's Finished and the records after it stay with the endpoint); its
// writes go to the endpoint to send to the peer.
type relayConn struct {
	uc      *net.UnixConn
	pending []byte
	// afterRead counts the records written since the last read: once the handshake is done,
	// the records the server sent under its application traffic keys, whose count is the
	// endpoint's first sequence number.
	afterRead int
	partial   int // bytes of the current written record still to come
}

func (r *relayConn) Read(b []byte) (int, error) {
	if len(r.pending) == 0 {
		if err := ktls.WriteFrame(r.uc, ktls.FrameNeed, nil); err != nil {
			return 0, err
		}
		typ, payload, err := ktls.ReadFrame(r.uc)
		if err != nil {
			return 0, err
		}
		if typ != ktls.FrameRecord {
			return 0, fmt.Errorf("tlsproxy: endpoint sent frame type %q, want a record", typ)
		}
		r.pending = payload
		r.afterRead, r.partial = 0, 0
	}
	n := copy(b, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

func (r *relayConn) Write(b []byte) (int, error) {
	if err := ktls.WriteFrame(r.uc, ktls.FrameData, b); err != nil {
		return 0, err
	}
	r.count(b)
	return len(b), nil
}

// count counts the records starting in b; crypto/tls writes whole records, so a header never
// straddles two writes.
func (r *relayConn) count(b []byte) {
	for len(b) > 0 {
		if r.partial > 0 {
			n := min(r.partial, len(b))
			r.partial -= n
			b = b[n:]
			continue
		}
		if len(b) < 5 {
			return
		}
		r.afterRead++
		r.partial = 5 + (int(b[3])<<8 | int(b[4]))
	}
}

func (r *relayConn) Close() error                      { return r.uc.Close() }
func (r *relayConn) LocalAddr() net.Addr               { return r.uc.LocalAddr() }
func (r *relayConn) RemoteAddr() net.Addr              { return r.uc.RemoteAddr() }
func (r *relayConn) SetDeadline(t time.Time) error     { return r.uc.SetDeadline(t) }
func (r *relayConn) SetReadDeadline(t time.Time) error { return r.uc.SetReadDeadline(t) }
func (r *relayConn) SetWriteDeadline(t time.Time) error {
	return r.uc.SetWriteDeadline(t)
}
