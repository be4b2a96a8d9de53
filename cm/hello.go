package cm

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The hello: the first frame each way, and where the two ends learn what the other can do.
//
// The client sends {"type":"hello","proto":"xdproce-cm","version":2,"caps":[...],"nonce":HEX}.
// The server answers with a hello carrying its own capabilities, how it authenticates clients
// ("auth": AuthNone, AuthPSK, AuthTLS) and, with a pre-shared key, its nonce and proof
// (auth.go); or with one error frame, and closes. Version 2 is the first with the capability
// exchange: from here on a feature is a capability (a name in "caps"), not a new version, and
// a side that needs a capability the peer lacks refuses with one line naming it. A version 1
// peer (before capabilities and authentication) is refused with ErrVersionMismatch and a line
// telling which side to upgrade; both ends accept any version from 2 on.

// ProtocolName and ProtocolVersion are what the hello frames carry. ProtocolVersion is the
// version of the hello's format; features are Capabilities.
const (
	ProtocolName    = "xdproce-cm"
	ProtocolVersion = 2
)

// Capabilities. Later features add names here; a peer that lacks one is refused with one line
// (Config.Require on either side, and the server's own requirements for its authentication).
const (
	// CapPSK: the pre-shared key challenge of auth.go.
	CapPSK = "auth-psk-hmac-sha256"
	// CapOverwrite: the server honours a client's request to replace an existing file (and
	// refuses it unless configured to allow it).
	CapOverwrite = "overwrite"
	// CapOOO: OOO mode (docs/ooo.md): the side runs OOO queue pairs for a client that asks
	// (bench write --mode ooo; serve's put_ooo and get_ooo for send/get --mode ooo).
	CapOOO = "ooo"
	// CapRange: the server sends part of a file when a get asks for one (internal/xfer's span;
	// `xdproce gateway` for an HTTP Range).
	CapRange = "get-range"
	// CapOOO3P: third-party copy (docs/ooo.md, Third party): serve's copy_source and
	// copy_sink, which make an OOO queue pair acting for the client's queue pair (xdproce copy).
	CapOOO3P = "ooo-3p"
	// CapLMRM: RC file transfers (send, get) on an lmrm pool: one LMRM_ALLOC, then a WRITE
	// WITH IMMEDIATE per slot, no control message per slot (serve's put_lmrm and get_lmrm).
	CapLMRM = "lmrm"
	// CapSR: the side's RC queue pairs do selective repeat (docs/sr-wire.md) with a peer that
	// agrees per connection (xfer's request and accept say "reliability":"sr").
	CapSR = "sr"
	// CapDCQCN: the side's RC queue pairs do DCQCN congestion control (docs/cc.md: ECT(0)
	// frames, CNPs for CE-marked ones, paced requests) with a peer that agrees per connection
	// (xfer's request and accept say "cc":"dcqcn").
	CapDCQCN = "dcqcn"
)

// Capabilities lists what this side offers in its hello.
var Capabilities = []string{CapPSK, CapOverwrite, CapOOO, CapRange, CapOOO3P, CapLMRM, CapSR, CapDCQCN}

// How a server authenticates its clients, as its hello says.
const (
	AuthNone = "none"            // Config.Insecure: anyone who reaches the port
	AuthPSK  = "psk"             // Config.PSK
	AuthTLS  = "tls-client-cert" // TLSConfig.ClientCAFile
)

// PeerCaps returns the capabilities the peer announced in its hello.
func (c *Conn) PeerCaps() []string { return c.peer }

// PeerHas reports whether the peer announced capability name.
func (c *Conn) PeerHas(name string) bool { return slices.Contains(c.peer, name) }

// missingCap returns the first of want that have lacks ("" when none).
func missingCap(have, want []string) string {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return w
		}
	}
	return ""
}

// clientHello runs the client side of the hello exchange and the authentication.
func (c *Conn) clientHello(ctx context.Context, cfg *Config) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	nc := newNonce()
	if err := c.sendMsg(ctx, &Message{Type: TypeHello, Proto: ProtocolName, Version: ProtocolVersion,
		Caps: Capabilities, Nonce: nc.String()}); err != nil {
		return err
	}
	m, err := c.recv(ctx)
	if err == io.EOF {
		return fmt.Errorf("hello: %w: %v closed the connection (not an xdproce server?)", ErrProtocol, c.nc.RemoteAddr())
	}
	if err != nil {
		return fmt.Errorf("hello: %w", tlsClientCertHint(err))
	}
	if err := checkHello(m, "server"); err != nil {
		return err
	}
	c.peer = m.Caps
	if miss := missingCap(m.Caps, cfg.Require); miss != "" {
		return fmt.Errorf("hello: %w: the server lacks %q (an older xdproce: upgrade it)", ErrCapability, miss)
	}
	return c.clientAuth(ctx, cfg, m, nc)
}

// serverHello runs the server side: it reads the client's hello and answers it, then
// authenticates the client; on failure it sends one error frame and returns the error.
func (c *Conn) serverHello(ctx context.Context, l *Listener) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	m, err := c.recv(ctx)
	if err == io.EOF {
		return fmt.Errorf("hello: %w: %v closed the connection before its hello", ErrProtocol, c.nc.RemoteAddr())
	}
	refuse := func(err error) error {
		c.sendMsg(ctx, &Message{Type: TypeError, Error: err.Error()})
		return err
	}
	if err != nil {
		return c.refuseForeign(ctx, fmt.Errorf("hello: %w", err))
	}
	if err := checkHello(m, "client"); err != nil {
		return refuse(err)
	}
	c.peer = m.Caps
	need := l.require
	if l.psk != nil {
		need = append(slices.Clip(need), CapPSK)
	}
	if miss := missingCap(m.Caps, need); miss != "" {
		return refuse(fmt.Errorf("hello: %w: the client lacks %q (an older xdproce: upgrade it)", ErrCapability, miss))
	}
	return c.serverAuth(ctx, l, m, refuse)
}

// checkHello checks the peer's hello (or the error frame it sent instead).
func checkHello(m *Message, peer string) error {
	if m.Type == TypeError {
		// The peer refused our hello; keep its reason, and the sentinel when it says why.
		low := strings.ToLower(m.Error)
		switch {
		case strings.Contains(low, ErrVersionMismatch.Error()) && strings.Contains(low, "this side speaks version 1,"):
			// Version 1's refusal of any other version.
			return fmt.Errorf("hello: %w: the %s is an xdproce from before the capability exchange and authentication (upgrade the %s; it says: %s)",
				ErrVersionMismatch, peer, peer, m.Error)
		case strings.Contains(low, ErrVersionMismatch.Error()):
			return fmt.Errorf("hello: %w (the %s says: %s)", ErrVersionMismatch, peer, m.Error)
		case strings.Contains(low, ErrCapability.Error()):
			return fmt.Errorf("hello: %w (the %s says: %s)", ErrCapability, peer, m.Error)
		case strings.Contains(low, ErrAuth.Error()):
			return fmt.Errorf("hello: %w (the %s says: %s)", ErrAuth, peer, m.Error)
		case strings.Contains(low, "requires tls"):
			return fmt.Errorf("hello: %w: the %s says: %s", ErrTLSRequired, peer, m.Error)
		}
		return fmt.Errorf("hello: %w: %s", ErrRemote, m.Error)
	}
	if m.Type != TypeHello || m.Proto != ProtocolName {
		return fmt.Errorf("hello: %w: the %s is not an xdproce control endpoint (got type %q proto %q)", ErrProtocol, peer, m.Type, m.Proto)
	}
	if m.Version < ProtocolVersion {
		return fmt.Errorf("hello: %w: the %s speaks version %d, before capabilities and authentication; this side needs %d or later (upgrade the %s)",
			ErrVersionMismatch, peer, m.Version, ProtocolVersion, peer)
	}
	return nil
}

// tlsClientCertHint explains the TLS alerts a server that wants a client certificate sends.
func tlsClientCertHint(err error) error {
	s := err.Error()
	switch {
	case strings.Contains(s, "certificate required"):
		return fmt.Errorf("%w: the server requires a client certificate (--tls-cert FILE --tls-key FILE): %v", ErrAuth, err)
	case strings.Contains(s, "tls: bad certificate"), strings.Contains(s, "tls: unknown certificate authority"),
		strings.Contains(s, "tls: certificate expired"):
		return fmt.Errorf("%w: the server refused this side's client certificate: %v", ErrAuth, err)
	}
	return err
}

// sendMsg sends m during the hello and the authentication: its errors, like recv's, do not
// begin with "cm: " (Dial and Accept add it with the peer's address).
func (c *Conn) sendMsg(ctx context.Context, m *Message) error { return c.send(ctx, m, m.Type) }
