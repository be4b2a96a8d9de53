package cm

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
)

// Authentication with a pre-shared key (Config.PSK), run right after the hellos:
//
//	client hello:  caps Cc, nonce Nc (32 random bytes)
//	server hello:  caps Cs, auth "psk", nonce Ns, mac HMAC-SHA256(K, "xdproce-cm psk server" 0 T)
//	client:        {"type":"auth","mac": HMAC-SHA256(K, "xdproce-cm psk client" 0 T)}
//	server:        {"type":"auth"} — or an error frame, and it closes
//
// where T is Nc, Ns and the two capability lists (each name preceded by its length, each list
// by its count). Each side proves it holds K for nonces the other chose; the key itself never
// goes on the wire, the labels keep one side's proof from serving as the other's, and a
// capability list changed on the way (to turn a feature off) fails both proofs. Nothing but these
// frames passes before the server's {"type":"auth"}: no request is read, so no queue pair,
// rkey or file is handed to a client that has not proved the key.

// TypeAuth is the type of the authentication frames.
const TypeAuth = "auth"

// MinPSK is the shortest pre-shared key accepted, in bytes.
const MinPSK = 16

type nonce [32]byte

func newNonce() nonce {
	var n nonce
	rand.Read(n[:])
	return n
}

func (n nonce) String() string { return hex.EncodeToString(n[:]) }

// pskMAC is the proof of side ("server" or "client") for the nonces and the capability lists
// of the two hellos.
func pskMAC(key []byte, side string, nc, ns []byte, clientCaps, serverCaps []string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("xdproce-cm psk " + side))
	h.Write([]byte{0})
	h.Write(nc)
	h.Write(ns)
	for _, caps := range [][]string{clientCaps, serverCaps} {
		h.Write([]byte{byte(len(caps) >> 8), byte(len(caps))})
		for _, c := range caps {
			h.Write([]byte{byte(len(c) >> 8), byte(len(c))})
			h.Write([]byte(c))
		}
	}
	return h.Sum(nil)
}

func decodeNonce(s string) ([]byte, bool) {
	b, err := hex.DecodeString(s)
	return b, err == nil && len(b) == len(nonce{})
}

// LoadPSK reads a pre-shared key file: its bytes, without trailing white space, at least
// MinPSK of them ("head -c 32 /dev/urandom | base64 > FILE" makes one).
func LoadPSK(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cm: pre-shared key: %w", err)
	}
	b = bytes.TrimRight(b, " \t\r\n")
	if len(b) < MinPSK {
		return nil, fmt.Errorf("cm: pre-shared key %s: %d bytes, want at least %d (make one with: head -c 32 /dev/urandom | base64 > NEWFILE)", path, len(b), MinPSK)
	}
	return b, nil
}

// WritePSK writes a fresh random key to path (mode 0600) and returns it.
func WritePSK(path string) ([]byte, error) {
	var raw [32]byte
	rand.Read(raw[:])
	key := []byte(hex.EncodeToString(raw[:]))
	if err := os.WriteFile(path, append(key, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("cm: pre-shared key: %w", err)
	}
	return key, nil
}

// serverAuthKind is what the server's hello says about how it authenticates clients.
func (l *Listener) authKind() string {
	switch {
	case l.psk != nil:
		return AuthPSK
	case l.tcfg != nil && l.tcfg.ClientCAs != nil:
		return AuthTLS
	}
	return AuthNone
}

// serverAuth answers the client's hello m and, with a pre-shared key, runs the challenge.
func (c *Conn) serverAuth(ctx context.Context, l *Listener, m *Message, refuse func(error) error) error {
	hello := &Message{Type: TypeHello, Proto: ProtocolName, Version: ProtocolVersion, Caps: Capabilities, Auth: l.authKind()}
	if l.psk == nil {
		return c.sendMsg(ctx, hello)
	}
	nc, ok := decodeNonce(m.Nonce)
	if !ok {
		return refuse(fmt.Errorf("hello: %w: the client's nonce is not 32 bytes of hex", ErrProtocol))
	}
	ns := newNonce()
	hello.Nonce = ns.String()
	hello.MAC = hex.EncodeToString(pskMAC(l.psk, "server", nc, ns[:], m.Caps, hello.Caps))
	if err := c.sendMsg(ctx, hello); err != nil {
		return err
	}
	a, err := c.recv(ctx)
	if err != nil {
		return fmt.Errorf("authentication: %w (the client gave up before proving the pre-shared key)", err)
	}
	if a.Type != TypeAuth {
		return refuse(fmt.Errorf("%w: the client sent %q before proving the pre-shared key", ErrAuth, a.Type))
	}
	mac, err := hex.DecodeString(a.MAC)
	if err != nil || !hmac.Equal(mac, pskMAC(l.psk, "client", nc, ns[:], m.Caps, hello.Caps)) {
		return refuse(fmt.Errorf("%w: the client's proof of the pre-shared key is wrong (the keys differ, or the hellos were changed on the way)", ErrAuth))
	}
	return c.sendMsg(ctx, &Message{Type: TypeAuth})
}

// clientAuth checks the server hello m's authentication against cfg and, with a pre-shared
// key, proves it; nc is the nonce this side's hello carried.
func (c *Conn) clientAuth(ctx context.Context, cfg *Config, m *Message, nc nonce) error {
	if m.Auth != AuthPSK {
		if cfg.PSK != nil {
			return fmt.Errorf("%w: the server does not use a pre-shared key (it authenticates clients by %q)", ErrAuth, m.Auth)
		}
		return nil
	}
	if cfg.PSK == nil {
		return fmt.Errorf("%w: the server requires a pre-shared key (--psk-file FILE)", ErrAuth)
	}
	ns, ok := decodeNonce(m.Nonce)
	mac, err := hex.DecodeString(m.MAC)
	if !ok || err != nil || !hmac.Equal(mac, pskMAC(cfg.PSK, "server", nc[:], ns, Capabilities, m.Caps)) {
		return fmt.Errorf("%w: the server's proof of the pre-shared key is wrong (the keys differ, or the hellos were changed on the way)", ErrAuth)
	}
	if err := c.sendMsg(ctx, &Message{Type: TypeAuth, MAC: hex.EncodeToString(pskMAC(cfg.PSK, "client", nc[:], ns, Capabilities, m.Caps))}); err != nil {
		return err
	}
	r, err := c.recv(ctx)
	if err != nil {
		return fmt.Errorf("authentication: %w", err)
	}
	if r.Type == TypeError {
		return checkHello(r, "server")
	}
	if r.Type != TypeAuth {
		return fmt.Errorf("authentication: %w: the server sent %q", ErrProtocol, r.Type)
	}
	return nil
}
