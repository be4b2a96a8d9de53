package xsk

// BindMode chooses between zero-copy and copy mode.
type BindMode int

const (
	// BindAuto lets the kernel use zero-copy where the driver supports it and
	// copy mode otherwise (veth, tap: copy only).
	BindAuto BindMode = iota
	// BindCopy forces copy mode (XDP_COPY).
	BindCopy
	// BindZeroCopy requires zero-copy (XDP_ZEROCOPY); Open fails without it.
	BindZeroCopy
)

// Config configures the sockets. The zero value (or a nil *Config) gives
// sensible defaults.
type Config struct {
	// Queues lists the rx queues to open a socket on; nil means every queue
	// of the interface.
	Queues []int
	// ChunkSize is the UMEM chunk size, a power of two in 2048..4096 (the
	// kernel refuses larger aligned chunks); 0 means 4096.
	ChunkSize int
	// RxChunks and TxChunks are the UMEM chunks for receiving and sending, per
	// socket; 0 means 2048 each, except RxChunks with multi-buffer: 4096,
	// since a received frame over one chunk takes two or more (at MTU 9000 a
	// PMTU 4096 RoCE frame takes two, and 1024 of them in flight — the
	// default RoCE send window — overflowed a 2048-entry fill ring: the kernel
	// dropped frames and go-back-N resent windows). Rounded up to powers of two.
	RxChunks, TxChunks int
	// MTU is the L3 MTU frames are sized for; 0 means the interface's MTU.
	MTU int
	// Bind chooses zero-copy or copy mode.
	Bind BindMode
	// NoNeedWakeup turns off XDP_USE_NEED_WAKEUP (then every Send makes a
	// syscall).
	NoNeedWakeup bool
	// MultiBuffer forces XDP_USE_SG even when frames fit a chunk. It is
	// turned on anyway when MTU+18 exceeds the receive room of a chunk.
	MultiBuffer bool
}

func (c *Config) withDefaults() Config {
	var d Config
	if c != nil {
		d = *c
	}
	if d.ChunkSize == 0 {
		d.ChunkSize = 4096
	}
	if d.TxChunks == 0 {
		d.TxChunks = 2048
	}
	if d.RxChunks != 0 { // 0: chosen by open, which knows whether frames span chunks
		d.RxChunks = pow2(d.RxChunks)
	}
	d.TxChunks = pow2(d.TxChunks)
	return d
}

func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
