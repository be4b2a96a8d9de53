// Package tlsproxy is the proxy of TLS with the handshake in a separate process: it holds the
// certificate and key and runs TLS 1.3 handshakes with crypto/tls for endpoints (cm/ktls) that
// connect to its unix socket, then hands each endpoint the session's parameters.
//
// Listen makes the socket (mode 0600; a stale socket is replaced, a live one or another file
// is left alone); Serve runs one handshake per connection; Handle checks the endpoint's
// credentials (SO_PEERCRED: the proxy's own user or root), runs tls.Server over relayConn —
// a net.Conn whose reads are the peer's records the endpoint relays, asked for one at a time
// (ktls.FrameNeed), and whose writes go to the endpoint to send (ktls.FrameData) — and sends
// ktls.FrameParams or ktls.FrameFail.
//
// The parameters come from the handshake's own secrets: Config.KeyLogWriter receives
// CLIENT_TRAFFIC_SECRET_0 and SERVER_TRAFFIC_SECRET_0, and the key and IV of each direction
// are HKDF-Expand-Label(secret, "key"/"iv", "", length) with the suite's hash (RFC 8446 §7.1,
// §7.3). TLS 1.3 only, session tickets disabled; a client that offers no AES-GCM suite, or puts
// TLS_CHACHA20_POLY1305_SHA256 ahead of them (crypto/tls would pick it), is refused in
// GetConfigForClient with a reason, and a negotiated suite the endpoint lacks fails the
// handshake. Client certificates are not requested.
package tlsproxy
