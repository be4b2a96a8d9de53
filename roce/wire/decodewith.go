package wire

// DecodeFlags select what DecodeWith does beyond Decode.
type DecodeFlags uint8

// Decode flags.
const (
	// InPlace hashes the ICRC in the frame, as DecodeWritable.
	InPlace DecodeFlags = 1 << iota
	// AcceptOOO accepts the OOO opcodes (Transport OOO, 0xC0..0xC4,
	// docs/ooo-wire.md) and checks their rules. Without it they are
	// ErrUnknownOpcode, as any other opcode this package does not know, so
	// a receiver that did not negotiate OOO mode drops them as malformed.
	AcceptOOO
	// AcceptSR accepts the selective-repeat opcodes (Transport SR: SR_SACK,
	// docs/sr-wire.md). Without it they are ErrUnknownOpcode: a queue pair
	// that did not negotiate selective repeat never reads one.
	AcceptSR
	// ICRCChecked skips the ICRC check: the caller has verified the ICRC of
	// exactly these bytes itself (link/udp does, recovering the IPv4
	// Identification the kernel hid). Packet.ICRC is still read from the
	// frame. Without it a wrong ICRC is ErrBadICRC.
	ICRCChecked
)

// DecodeWith is Decode (flags 0) or DecodeWritable (InPlace), widened by
// AcceptOOO and AcceptSR, narrowed by ICRCChecked. It does not allocate and does not panic on any input.
func (p *Packet) DecodeWith(frame []byte, flags DecodeFlags) error {
	return p.decode(frame, flags)
}
