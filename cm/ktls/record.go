package ktls

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math"
)

// Record content types (RFC 8446 §5.1).
const (
	typeChangeCipherSpec byte = 20
	typeAlert            byte = 21
	typeHandshake        byte = 22
	typeApplicationData  byte = 23
)

// Record size limits (RFC 8446 §5.1, §5.2).
const (
	headerLen     = 5
	maxPlaintext  = 1 << 14
	maxCiphertext = maxPlaintext + 256
	tagLen        = 16
)

// Alert descriptions the endpoint sends or names (RFC 8446 §6).
const (
	alertCloseNotify       byte = 0
	alertUnexpectedMessage byte = 10
	alertBadRecordMAC      byte = 20
	alertRecordOverflow    byte = 22
	alertDecodeError       byte = 50
	alertInternalError     byte = 80
)

// AlertError is an alert: one the peer sent (Remote) or one the endpoint sent before closing.
type AlertError struct {
	Desc   byte
	Remote bool
	Why    string
}

func (e *AlertError) Error() string {
	if e.Remote {
		return fmt.Sprintf("ktls: the peer sent alert %d (%s)", e.Desc, alertName(e.Desc))
	}
	return fmt.Sprintf("ktls: %s (sent alert %d, %s)", e.Why, e.Desc, alertName(e.Desc))
}

func alertName(d byte) string {
	switch d {
	case alertCloseNotify:
		return "close_notify"
	case alertUnexpectedMessage:
		return "unexpected_message"
	case alertBadRecordMAC:
		return "bad_record_mac"
	case alertRecordOverflow:
		return "record_overflow"
	case alertDecodeError:
		return "decode_error"
	case alertInternalError:
		return "internal_error"
	case 40:
		return "handshake_failure"
	case 42:
		return "bad_certificate"
	case 48:
		return "unknown_ca"
	case 90:
		return "user_canceled"
	}
	return "alert"
}

// halfConn is one direction of the user-space record layer: the AEAD, the static IV and the
// sequence number of the next record.
type halfConn struct {
	aead  cipher.AEAD
	iv    [IVLen]byte
	seq   uint64
	nonce [IVLen]byte
}

func newHalf(suite uint16, d Direction) (*halfConn, error) {
	if len(d.Key) != KeyLen(suite) || len(d.IV) != IVLen {
		return nil, fmt.Errorf("%w: key of %d bytes and IV of %d for %s", ErrParams, len(d.Key), len(d.IV), SuiteName(suite))
	}
	block, err := aes.NewCipher(d.Key)
	if err != nil {
		return nil, fmt.Errorf("ktls: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("ktls: %w", err)
	}
	h := &halfConn{aead: aead, seq: d.Seq}
	copy(h.iv[:], d.IV)
	return h, nil
}

// next returns the nonce of the next record (the IV XOR the 64-bit sequence number, RFC 8446
// §5.3) and advances the sequence number; a sequence number that would wrap is refused
// (2^64 records: impossible in practice, but a wrap would reuse a nonce).
func (h *halfConn) next() ([]byte, error) {
	if h.seq == math.MaxUint64 {
		return nil, fmt.Errorf("ktls: record sequence number exhausted")
	}
	h.nonce = h.iv
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], h.seq)
	for i := range s {
		h.nonce[IVLen-8+i] ^= s[i]
	}
	h.seq++
	return h.nonce[:], nil
}

// seal encrypts the inner plaintext b[headerLen:headerLen+n] (content followed by its type
// byte) in place and writes the record header into b[:headerLen]; b needs tagLen bytes of
// room after the plaintext. It returns the whole record.
func (h *halfConn) seal(b []byte, n int) ([]byte, error) {
	nonce, err := h.next()
	if err != nil {
		return nil, err
	}
	b[0] = typeApplicationData
	b[1], b[2] = 3, 3
	binary.BigEndian.PutUint16(b[3:5], uint16(n+tagLen))
	out := h.aead.Seal(b[headerLen:headerLen], nonce, b[headerLen:headerLen+n], b[:headerLen])
	return b[:headerLen+len(out)], nil
}

// open decrypts a record (header and body) in place and returns the content and its type,
// padding removed.
func (h *halfConn) open(rec []byte) (typ byte, content []byte, err error) {
	nonce, err := h.next()
	if err != nil {
		return 0, nil, err
	}
	plain, err := h.aead.Open(rec[headerLen:headerLen], nonce, rec[headerLen:], rec[:headerLen])
	if err != nil {
		return 0, nil, &AlertError{Desc: alertBadRecordMAC, Why: "a record failed authentication"}
	}
	if len(plain) > maxPlaintext+1 {
		return 0, nil, &AlertError{Desc: alertRecordOverflow, Why: fmt.Sprintf("inner plaintext of %d bytes", len(plain))}
	}
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 {
		return 0, nil, &AlertError{Desc: alertUnexpectedMessage, Why: "a record with no content type"}
	}
	return plain[i], plain[:i], nil
}
