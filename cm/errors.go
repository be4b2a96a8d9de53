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
	// ErrControlPeer: a perftest or pingpong exchange reached a peer that speaks xdproce's
	// control protocol ('xdproce serve') instead.
	ErrControlPeer = errors.New("the peer speaks xdproce's control protocol")
)

var (
	// ErrAuth: authentication failed (a missing or wrong pre-shared key or client certificate).
	ErrAuth = errors.New("authentication failed")
	// ErrCapability: the peer lacks a capability this side needs (an older xdproce).
	ErrCapability = errors.New("missing capability")
	// ErrTLSRequired: the server runs TLS and this client spoke plain TCP.
	ErrTLSRequired = errors.New("server requires TLS")
	// ErrNoAuth: Listen without a way to authenticate clients and without Insecure.
	ErrNoAuth = errors.New("no client authentication")
)
