// Package ktls is the endpoint of TLS with the handshake in a separate proxy (cm/tlsproxy,
// `xdproce tls-proxy`): it owns the TCP connection to the peer and moves the application data,
// while the proxy, which holds the certificate, its key and the TLS implementation, runs the
// handshake. It does not link crypto/tls (a test checks `go list -deps`).
//
// Flow (Server): the endpoint takes the peer's connection; it dials the proxy's unix socket and
// checks the proxy's credentials (SO_PEERCRED: its own user or root), then relays. The proxy
// drives (proto.go): FrameData carries bytes for the peer, FrameNeed asks for the peer's next
// record, which the endpoint reads whole (5-byte header, then the body, never more) and sends
// as FrameRecord; FrameParams ends the handshake with the session parameters (Params: TLS 1.3,
// the suite, and per direction the traffic key, the 12-byte IV and the next record's sequence
// number), FrameFail with the proxy's reason. Because the proxy asks for one record at a time
// and its TLS stack stops at the client's Finished, records the client sent after its Finished
// (application data in the same flight) stay in the socket for the endpoint. The endpoint then
// installs the parameters into Linux kernel TLS (TCP_ULP "tls", SOL_TLS TLS_TX and TLS_RX) where
// the kernel has it (Config.Kernel: KernelAuto tries and falls back, saying why in Conn.Mode;
// KernelOff; KernelRequire), else runs its own TLS 1.3 record layer (record.go: AES-128-GCM and
// AES-256-GCM from crypto/aes and crypto/cipher; nonce = IV XOR sequence number, the record
// header as additional data, RFC 8446 §5.2–5.3).
//
// Choices where the seed (an abstract with a kernel endpoint) says nothing:
//   - TLS 1.3 only; no session tickets (the proxy disables them, so its stack sends nothing
//     after the handshake and both sequence numbers start at 0; the proxy still counts any
//     record it sent after the last one it read and hands that count as the send sequence).
//   - No rekeying: a KeyUpdate (or any handshake message) after the handshake makes the endpoint
//     send unexpected_message and close; Read returns an *AlertError saying so.
//   - No ChaCha20-Poly1305 (it would need golang.org/x/crypto): the proxy refuses a client that
//     offers no AES-GCM suite or puts ChaCha20 first.
//   - Alerts: the peer's close_notify makes Read return io.EOF; Close sends close_notify. Other
//     alerts from the peer end the connection (*AlertError with Remote). A record that fails
//     authentication (bad_record_mac), is longer than 2^14+256 bytes or whose inner plaintext
//     exceeds 2^14+1 (record_overflow), an unprotected record after the handshake or a record
//     without a content type (unexpected_message), or too short for the AEAD (decode_error) makes
//     the endpoint send that alert and stop. TCP ending without close_notify is
//     io.ErrUnexpectedEOF. Writes are split into records of at most 2^14 bytes. A sequence number
//     that would wrap (2^64 records) is refused rather than reuse a nonce.
//   - A failed handshake (the proxy fails it, the peer sends garbage, the proxy is not there or
//     breaks off) closes the connection; the endpoint sends the peer nothing but what the proxy
//     produced and, when the proxy is gone or the peer's bytes are not TLS records, one plaintext
//     alert of its own. No application data passes either way.
//   - A peer whose first byte is not a handshake record gets *NotTLSError (ErrNotTLS) with a
//     connection that replays that byte, so a caller can answer it in its own protocol (cm tells
//     plain control clients to use TLS).
//
// Kernel TLS: the crypto info structs of linux/tls.h are laid out by hand (kernel_linux.go;
// golang.org/x/sys/unix has SOL_TLS and TCP_ULP only); for TLS 1.3 the salt is the IV's first 4
// bytes. Records that are not application data are read and written with the TLS record-type
// control messages. ProbeKernel says whether this kernel takes sessions; KernelInstalled checks
// getsockopt(TLS_TX) on a connection.
package ktls
