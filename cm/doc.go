// Package cm sets up connections out of band: it carries the queue pair numbers, PSNs, GIDs,
// rkeys and addresses two RoCE endpoints must learn from each other before they can talk RDMA.
//
// Three protocols live here, all over TCP (default port 18515, DefaultPort):
//
//   - rdma-core's pingpong exchange (ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong):
//     PingpongDest, DialPingpong, ServePingpong. One NUL-terminated text line each way and a
//     closing "done" from the client.
//   - perftest's exchange (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_send_lat):
//     PerftestConn with the steps perftest takes (versions, system data, MTU, key handshakes,
//     bandwidth reports, "done"), PerftestDest for the 108-byte key message, and
//     PerftestPlan for the order of the steps of each tool as observed against perftest 6.06.
//   - xdproce's own control protocol between two xdproce processes: Dial, Listen, Conn and
//     Message. Frames are a 4-byte big-endian length followed by one JSON object; the first
//     frame each way is a hello carrying the protocol name, ProtocolVersion and the sender's
//     Capabilities (a peer lacking one the other side needs is refused with one line,
//     ErrCapability; a version 1 peer with ErrVersionMismatch). The server authenticates its
//     clients before anything else passes: a pre-shared key proved by an HMAC challenge each
//     way (Config.PSK), or TLS client certificates (TLSConfig.ClientCAFile); Listen refuses to
//     run with neither unless Config.Insecure. It may run over TLS, with a certificate and key
//     from files or a self-signed pair (kept in TLSConfig.Dir so it survives restarts) the
//     client pins by its SHA-256 fingerprint; a plain client of a TLS server is told so. With
//     Config.TLSProxy the handshake runs instead in a separate proxy process (cm/tlsproxy)
//     and the connection's data moves through cm/ktls (kernel TLS where the kernel has it).
//     Clients retry the connection with backoff for a configurable time, since a server may
//     still be starting.
//
// Two xdproce ends of the pingpong or perftest exchange recognise each other inside it and agree
// on the run's parameters (Negotiation, negotiate.go): each picks its first PSN as TagPSN of its
// other address fields; a server that reads a client's address whose PSN is its tag answers
// with a hello of the same length instead of its own address; the client then sends its
// BenchParams as one frame and the server answers with the values both use or a refusal
// (ErrParamMismatch). Both return *AgreedError, and the caller runs the stock exchange again on
// the same connection with the agreed values. A stock peer receives exactly the tool's
// messages (a PSN is a random number to it); only a stock client whose random PSN equals the
// tag (one in 2^24) would get the hello, and stop with a read error.
//
// The protocol types are plain values and know nothing of queue pairs or devices: the caller
// moves its QP through INIT/RTR/RTS between the steps (the callbacks of ServePingpong and
// PerftestSetup are where that happens); internal/toolpeer drives a roce queue pair through
// these exchanges as the tools do, for the CLI's pingpong and bench commands. Conn.SendValue and
// RecvValue let a caller carry its own JSON messages over a connection Dial or Accept set up;
// ExchangeRC is the common case, one RC endpoint and memory region each way.
//
// Errors: ErrVersionMismatch, ErrFingerprintMismatch, ErrProtocol, ErrAuth, ErrCapability,
// ErrTLSRequired, ErrNoAuth, ErrParamMismatch and ErrControlPeer (a bench or pingpong client
// reached 'xdproce serve') are sentinels callers may branch on (errors.Is); dial failures keep
// the net error (connection refused, no route to host) reachable through %w and name the
// address and how long the client retried.
package cm
