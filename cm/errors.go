package cm

import "errors"

var (
	// ErrProtocol: the peer sent something this side cannot parse, or closed mid-exchange.
	ErrProtocol = errors.New("protocol error")
	// ErrVersionMismatch: the peer speaks another version of xdproce's control protocol.
	ErrVersionMismatch = errors.New("protocol version mismatch")
	// ErrFingerprintMismatch: the server's TLS certificate is not the pinned one.
	ErrFingerprintMismatch = errors.New("tls certificate fingerprint mismatch")
	// ErrRemote: the peer answered a request with an error message (the text follows).
	ErrRemote = errors.New("peer reported an error")
)
