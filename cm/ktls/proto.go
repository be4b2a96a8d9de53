package ktls

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frames on the unix socket between the endpoint and the proxy: a type byte, a 4-byte
// big-endian payload length, the payload. The endpoint opens with FrameHello (its role, and a
// client's verification settings); then the proxy drives: it sends FrameData (bytes for the
// peer) and FrameNeed (send me the peer's next record), which the endpoint answers with
// exactly one FrameRecord, and ends with FrameParams or FrameFail. The endpoint thus never
// reads a record from the peer the proxy did not ask for.
const (
	// FrameHello (endpoint → proxy, first): Hello as JSON.
	FrameHello byte = 'H'
	// FrameRecord (endpoint → proxy): one whole TLS record from the peer, header included.
	FrameRecord byte = 'R'
	// FrameData (proxy → endpoint): bytes to send to the peer as they are.
	FrameData byte = 'D'
	// FrameNeed (proxy → endpoint): the handshake needs the peer's next record.
	FrameNeed byte = 'N'
	// FrameParams (proxy → endpoint): the handshake is done; the payload is Params.Marshal.
	FrameParams byte = 'P'
	// FrameFail (proxy → endpoint): the handshake failed; the payload says why (text).
	FrameFail byte = 'F'
)

// Roles of an endpoint in the TLS handshake (Hello.Role).
const (
	RoleServer = "server"
	RoleClient = "client"
)

// Hello opens an endpoint's conversation with the proxy. A client endpoint says how the
// proxy is to verify the server: Fingerprint (SHA-256 of its certificate, 64 hex digits)
// pins it, else the server's chain is verified against RootCAs (PEM) or, without them, the
// system roots, for ServerName.
type Hello struct {
	Role        string `json:"role"`
	ServerName  string `json:"server_name,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	RootCAs     []byte `json:"root_cas,omitempty"`
}

// MaxFrame bounds a frame's payload; a handshake flight with a long certificate chain fits.
const MaxFrame = 1 << 20

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("ktls: frame of %d bytes, the limit is %d", len(payload), MaxFrame)
	}
	b := make([]byte, 5+len(payload))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// ReadFrame reads one frame.
func ReadFrame(r io.Reader) (typ byte, payload []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:5])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("ktls: frame of %d bytes, the limit is %d", n, MaxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("ktls: frame cut short: %w", io.ErrUnexpectedEOF)
	}
	return h[0], payload, nil
}

// TLS 1.3 cipher suites the endpoint's record layer has (RFC 8446 B.4).
const (
	TLS_AES_128_GCM_SHA256 uint16 = 0x1301
	TLS_AES_256_GCM_SHA384 uint16 = 0x1302
)

// VersionTLS13 is TLS 1.3's protocol version number.
const VersionTLS13 uint16 = 0x0304

// SuiteName names a cipher suite the record layer has, or gives its number.
func SuiteName(s uint16) string {
	switch s {
	case TLS_AES_128_GCM_SHA256:
		return "TLS_AES_128_GCM_SHA256"
	case TLS_AES_256_GCM_SHA384:
		return "TLS_AES_256_GCM_SHA384"
	}
	return fmt.Sprintf("0x%04x", s)
}

// KeyLen is the AEAD key length of a suite the record layer has, else 0.
func KeyLen(s uint16) int {
	switch s {
	case TLS_AES_128_GCM_SHA256:
		return 16
	case TLS_AES_256_GCM_SHA384:
		return 32
	}
	return 0
}

// IVLen is the length of every TLS 1.3 AEAD's per-direction IV (RFC 8446 §5.3).
const IVLen = 12

// Direction holds one direction's traffic key, IV and the sequence number of the next record.
type Direction struct {
	Key []byte
	IV  []byte
	Seq uint64
}

// Params are the security parameters the proxy hands the endpoint once the handshake is
// done: Rx decrypts what the peer sends, Tx encrypts what the endpoint sends.
type Params struct {
	Version uint16
	Suite   uint16
	Rx, Tx  Direction
}

// Marshal encodes p: version u16, suite u16, then Rx and Tx each as key length u8, key, IV
// (12 bytes), sequence number u64, all big-endian.
func (p *Params) Marshal() []byte {
	b := binary.BigEndian.AppendUint16(nil, p.Version)
	b = binary.BigEndian.AppendUint16(b, p.Suite)
	for _, d := range []*Direction{&p.Rx, &p.Tx} {
		b = append(b, byte(len(d.Key)))
		b = append(b, d.Key...)
		b = append(b, d.IV...)
		b = binary.BigEndian.AppendUint64(b, d.Seq)
	}
	return b
}

// ErrParams reports parameters the endpoint cannot use.
var ErrParams = errors.New("ktls: bad session parameters")

// UnmarshalParams decodes and checks parameters: TLS 1.3, a suite the record layer has, and
// keys and IVs of that suite's lengths.
func UnmarshalParams(b []byte) (*Params, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrParams, len(b))
	}
	p := &Params{Version: binary.BigEndian.Uint16(b), Suite: binary.BigEndian.Uint16(b[2:])}
	if p.Version != VersionTLS13 {
		return nil, fmt.Errorf("%w: version 0x%04x, want TLS 1.3", ErrParams, p.Version)
	}
	kl := KeyLen(p.Suite)
	if kl == 0 {
		return nil, fmt.Errorf("%w: cipher suite %s, the record layer has AES-128-GCM and AES-256-GCM", ErrParams, SuiteName(p.Suite))
	}
	b = b[4:]
	for _, d := range []*Direction{&p.Rx, &p.Tx} {
		if len(b) < 1+kl+IVLen+8 || int(b[0]) != kl {
			return nil, fmt.Errorf("%w: want a %d-byte key, a %d-byte IV and a sequence number each way", ErrParams, kl, IVLen)
		}
		d.Key = append([]byte(nil), b[1:1+kl]...)
		d.IV = append([]byte(nil), b[1+kl:1+kl+IVLen]...)
		d.Seq = binary.BigEndian.Uint64(b[1+kl+IVLen:])
		b = b[1+kl+IVLen+8:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrParams, len(b))
	}
	return p, nil
}
