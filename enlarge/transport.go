package enlarge

// Transport is the narrow slice of RDMA verbs a Channel needs: one connected
// RC queue pair with its completion queue, and memory registration in the
// protection domain of that queue pair. Verbs (NewVerbs) is the Transport
// over a roce.QP; tests also use an in-package fake. A Transport is used by
// one Channel; the Channel serialises its calls and puts "enlarge: " and what
// it was doing before the errors they return.
type Transport interface {
	// Register allocates n bytes and registers them for local write and
	// remote write.
	Register(n int) (Region, error)
	// Deregister invalidates r's keys at once (later accesses with them are
	// refused) and releases it.
	Deregister(r Region) error
	// PostSend posts one signaled work request. The memory it names must not
	// be written until its completion has been polled.
	PostSend(wr *WorkRequest) error
	// PostRecv posts a receive into r[off:off+n]; r == nil posts a
	// zero-length receive (enough for a WRITE_WITH_IMM, all a Channel uses).
	PostRecv(id uint64, r Region, off, n int) error
	// Poll stores up to len(c) completions in c without blocking.
	Poll(c []Completion) (int, error)
	// Load copies r[off:off+len(dst)] into dst: memory the peer RDMA-wrote.
	// Such writes are applied by another goroutine (the device's progress
	// engine). A Channel calls Load only after it has polled the completion
	// of the WRITE_WITH_IMM concerned, which orders it after the write for
	// any transport whose completion queue synchronises (a plain copy is
	// then race-free); a transport that can land bytes later (the test fake
	// delays an ENLARGE_ACK's tail) must synchronise Load with that itself.
	Load(r Region, off int, dst []byte)
}

// Region is registered memory.
type Region interface {
	// Bytes is the memory. The owner writes it only while no work request
	// and no remote access uses it.
	Bytes() []byte
	Addr() uint64 // I/O virtual address the keys are checked against
	LKey() uint32
	RKey() uint32
}

// Op is a send-queue operation.
type Op uint8

// Operations.
const (
	OpWrite    Op = iota + 1 // RDMA WRITE
	OpWriteImm               // RDMA WRITE with immediate data (a Channel uses only this)
)

// WorkRequest is one send-queue work request: Length bytes of Local from
// Offset, to RemoteAddr/RKey for writes.
type WorkRequest struct {
	ID         uint64
	Op         Op
	Local      Region
	Offset     int
	Length     int
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
}

// CompletionKind says what a completion reports.
type CompletionKind uint8

// Completion kinds.
const (
	CompSend    CompletionKind = iota + 1 // a send-queue work request finished
	CompRecvImm                           // a WRITE_WITH_IMM arrived (its data is in memory)
)

// Completion is one work completion.
type Completion struct {
	ID     uint64
	Kind   CompletionKind
	Status string // empty on success, else the ibverbs status name
	Imm    uint32
	HasImm bool
}
