// Package wire is the RoCEv2 wire format: Ethernet (with an optional 802.1Q
// tag), IPv4 or IPv6, UDP port 4791, the InfiniBand Base Transport Header and
// the extension headers (RETH, AETH, AtomicETH, AtomicAckETH, DETH, ImmDt,
// IETH), payload, pad and the invariant CRC; the opcode table; 24-bit PSN
// arithmetic; the UDP source ports Linux rxe uses; the path MTU enum; and
// gopacket layer types registered on UDP port 4791.
//
// It also holds xdproce's OOO mode (docs/ooo-wire.md): five opcodes in the
// manufacturer-specific range (OOO_WRITE, OOO_READ_REQ, OOO_COMPLETION and
// the third-party OOO_3P_READ_REQ and OOO_3P_WRITE, Transport OOO) and their
// headers XRH, XRR, XCS and XTP. Decode and DecodeWritable refuse them as
// unknown opcodes; a receiver that negotiated OOO mode decodes them with
// DecodeWith(frame, AcceptOOO), which also checks that each packet's place
// in its operation is consistent.
//
// It imports nothing else of xdproce, does no I/O and keeps no state besides
// read-only tables, so everything in it is safe for concurrent use on
// distinct values.
//
// # Buffers
//
// Packet.Decode parses a whole frame into a Packet without copying:
// Packet.Payload (and Packet.IPOptions) alias the frame, so they are valid
// only as long as the frame is; for a frame in link-owned memory (an AF_XDP
// UMEM chunk) that is until the link reuses the buffer, typically the next
// Receive. Copy the payload out before handing the frame back.
// Packet.DecodeWritable is Decode for the owner of a writable frame: it
// hashes the ICRC in place, in one pass (masking in the frame and restoring
// it before it returns), which saves some 20 ns a frame; Decode never writes
// to its input.
// DecodeWith is either of them, widened by AcceptOOO.
// Packet.Encode writes into a caller-owned buffer of at least FrameLen bytes
// and copies the payload; Packet.EncodeInPlace skips the copy for a payload
// already at HeaderLen in the buffer. Decode, DecodeWritable, DecodeWith,
// Encode, EncodeInPlace, ComputeICRC, VerifyICRC and SetICRC allocate
// nothing (the tests enforce testing.AllocsPerRun == 0), and never panic on
// any input.
//
// # Errors
//
// Every error is a package-level *Error value naming the step ("decode ipv4:
// total length below header + UDP header") and wrapping exactly one sentinel,
// so returning it allocates nothing and callers branch with errors.Is:
// ErrTruncated, ErrNotRoCE, ErrBadLength, ErrBadVersion, ErrUnknownOpcode,
// ErrBadPadCount, ErrBadChecksum, ErrBadICRC from decoding; ErrBadField,
// ErrShortBuffer (and ErrUnknownOpcode, ErrBadVersion, ErrBadLength) from
// encoding. Decode checks the ICRC last: ErrBadICRC (and ErrBadChecksum, the
// IPv4 header checksum, checked just before it) come with every field
// filled in, so a receiver can count the drop per QP. After any other error
// the Packet is undefined.
//
// # gopacket
//
// Importing the package registers LayerTypeBTH for UDP port 4791 with
// gopacket/layers. The BTH layer decodes the whole transport part (BTH,
// extension headers, payload, pad, ICRC) because which headers follow
// depends on the opcode; gopacket.NewPacket then also shows each extension
// header as its own layer. The ICRC covers the IP header, which a layer does
// not see: check it with VerifyICRC(packet.Data()), and after serialising
// with gopacket fill it in with SetICRC.
package wire
