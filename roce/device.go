package roce

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// Options configures a Device. A nil *Options means the defaults.
type Options struct {
	// Link selects the link Open uses (ignored by NewDevice).
	Link LinkKind
	// Daemon is the unix socket of the xdproce daemon to attach to
	// (LinkDaemon, and LinkAuto when set); "" means $XDPROCE_DAEMON, else
	// the socket the daemon serving the interface announces.
	Daemon string
	// Capture, when set, receives a pcapng capture of every frame sent and
	// received (package capture). The Device flushes it on Close and
	// FlushCapture.
	Capture io.Writer
	// Addrs are the device's IP addresses, the source of its GID table
	// (NewDevice; Open takes them from the interface).
	Addrs []netip.Addr
	// HWAddr is the device's MAC address when the link has none (NewDevice;
	// default: the link's, else a locally administered address derived from
	// the first of Addrs).
	HWAddr net.HardwareAddr
	// Resolve returns the MAC address for a next-hop IP address. Open sets a
	// netlink neighbour lookup for AF_XDP; nil means zero MACs (fine for
	// link/udp and link/pipe, which ignore them).
	Resolve func(ip netip.Addr) (net.HardwareAddr, error)
	// NeighborTimeout bounds one neighbour resolution by Open's resolver
	// (default 3 s).
	NeighborTimeout time.Duration
	// RxBatch is the number of frames read per engine round (default 64).
	RxBatch int
	// UDPPort is the local UDP port of link/udp under Open (default 4791).
	UDPPort int
	// Queues limits the AF_XDP sockets Open creates (default: one per rx
	// queue of the interface).
	Queues int
	// XDPMode is the attach mode of the steering program under Open:
	// "" (native, falling back to generic), "native" or "generic".
	XDPMode string
	// BusyPoll keeps the engine polling the link, without sleeping, for this
	// long after its last activity: lower latency for a core's worth of CPU.
	// 0 (the default) sleeps in the link's Wait as soon as there is nothing
	// to do; BusyPollAuto spins adaptively, briefly after sending (measured
	// from recent round trips) and while frames flow.
	BusyPoll time.Duration
	// RxCoalesce is receive coalescing, as a NIC's interrupt moderation:
	// after a round that received two frames or more and sent few (fewer
	// than one for every eight received: the receiving end of a transfer),
	// the engine sleeps this long, or until a doorbell, before it reads
	// again, instead of sleeping until the next frame arrives, which woke it
	// once or twice a frame for as much CPU as the frame's own processing.
	// Frames meanwhile wait in the link's receive ring. Rounds that send as
	// much as they receive, or receive one frame (a requester reading ACKs,
	// a ping-pong), wait as before. 0 means DefaultRxCoalesce; negative
	// turns it off. Links that cannot nap (link.Napper) wait instead;
	// BusyPoll overrides it.
	RxCoalesce time.Duration
	// MaxQPs limits the queue pairs the device holds at once (default
	// DefaultMaxQPs, rxe's max_qp); CreateQP beyond it fails with ErrLimit.
	MaxQPs int
	// MaxMRs limits the memory regions registered at once (default
	// mr.DefaultMaxMRs); RegMR beyond it fails with ErrLimit.
	MaxMRs int
	// commIDs, when commIDs[1] is not 0, is the range of RDMA CM
	// communication IDs the device's QP1 picks from (the daemon's clients).
	commIDs [2]uint32
	// qpns, when qpns[1] is not 0, is the range of QPNs the device hands
	// out (first, last): the one an xdproce daemon gave this client.
	qpns [2]uint32
	// holder is appended to what the process announces it holds (the
	// daemon adds whom it serves).
	holder string
	// shared, for a daemon client, shares memory regions with the daemon.
	shared *sharedRegions
	// CPUs, when not empty, pins the device's progress goroutine: it is
	// locked to its OS thread (runtime.LockOSThread) and that thread may run
	// only on these CPUs (sched_setaffinity). The progress goroutine does all
	// of a device's protocol work and, over AF_XDP in copy mode, the send
	// calls in which the kernel copies frames out, so it is a transfer's
	// busiest thread; left to the Go scheduler it moves between CPUs and
	// shares them with the application. Give it a CPU of its own (two
	// devices in one process: two CPUs). Every CPU must be one the calling
	// thread may run on; NewDevice and Open fail otherwise. When the device
	// closes, the thread gets its former affinity back and ends with the
	// goroutine (the runtime does not reuse a thread left locked). nil (the
	// default) leaves placement to the scheduler. Linux only.
	CPUs []int
	// OOOContexts is the size of the device's pool of OOO receive contexts
	// (0: DefaultOOOContexts; at most MaxOOOContexts), made when the first
	// OOO queue pair is created.
	OOOContexts int
	// ContextSeed fixes the first keys of the OOO contexts (reproducible
	// captures); 0 draws them from crypto/rand.
	ContextSeed uint64
	// Engines is the number of progress goroutines (0 and 1: one). More
	// than one needs a link of several queues (AF_XDP on an interface with
	// several rx queues: link.Splitter) and at most one engine per queue;
	// NewDevice and Open fail otherwise (link/udp, link/shm, link/pipe,
	// a single queue, Capture), rather than run one. Each engine receives
	// and sends on its share of the queues and runs its share of the queue
	// pairs (engines.go); CPUs, when given, pins engine i to CPUs[i mod
	// len(CPUs)] alone.
	Engines int
}

// DefaultRxCoalesce is the default of Options.RxCoalesce. The kernel adds
// its timer slack (50 us for ordinary threads) to a nap.
const DefaultRxCoalesce = 20 * time.Microsecond

// DefaultMaxQPs is the default of Options.MaxQPs (rxe's max_qp).
const DefaultMaxQPs = 1 << 16

// ErrLimit is returned (wrapped) when a device limit (Options.MaxQPs,
// Options.MaxMRs) is reached.
var ErrLimit = mr.ErrLimit

// Stats counts what the progress engine did. All counters only grow.
type Stats struct {
	RxFrames, RxBytes uint64
	TxFrames, TxBytes uint64
	// Dropped received frames, by reason.
	DropBadICRC    uint64 // ICRC mismatch
	DropMalformed  uint64 // did not decode (truncated, bad lengths, unknown opcode, ...)
	DropNotRoCE    uint64 // not UDP/4791
	DropUnknownQPN uint64 // no queue pair with the destination QPN
	TxNoBuffer     uint64 // a queue pair asked for a transmit buffer and none was free
	TxErrors       uint64 // link Send failures (frames may be lost; the protocol retransmits)
	// Frames an engine received for another engine's queue pair and handed
	// to it (Options.Engines); rounds in which an engine held received
	// frames because such an inbox was full; multicast frames dropped for
	// a full inbox (handoff.go).
	Handoffs, HandoffStalls, HandoffDrops uint64
	RxErrors                              uint64 // link Receive failures
	Rounds                                uint64 // engine rounds
	Naps                                  uint64 // receive-coalescing sleeps (Options.RxCoalesce; waits on links that cannot nap)
	Wakeups                               uint64 // Wake calls on the link by doorbells
	QPs                                   int    // queue pairs alive
	// Sums of the queue pairs' counters (roce/qp), destroyed ones included.
	Retransmits uint64 // packets sent again (go-back-N, RNR, timeout)
	Timeouts    uint64 // local ACK timeouts
	// FastRetransmits counts resends started because an ACK asked for was
	// overdue by the measured round trip (before the local ACK timeout).
	FastRetransmits uint64
	// SpuriousFastRetransmits counts fast retransmits undone because an ACK
	// showed the original packets had arrived (nothing was lost).
	SpuriousFastRetransmits uint64
	SeqNAKs                 uint64 // PSN sequence error NAKs sent and received
	RNRNAKs                 uint64 // RNR NAKs sent and received
	Duplicates              uint64 // duplicate requests received
	QPDropped               uint64 // packets the queue pairs dropped (state, sequence, Q_Key, stale)
	OOO                     OOOStats
	SR                      SRStats
	CC                      CCStats
}

// addQPStats adds the counters of one queue pair to st.
func addQPStats(st *Stats, q *qp.QP) {
	c := qpStats(q)
	st.Retransmits += c.Retransmits
	st.Timeouts += c.Timeouts
	st.FastRetransmits += c.FastRetransmits
	st.SpuriousFastRetransmits += c.SpuriousFastRetransmits
	st.SeqNAKs += c.SeqNAKsSent + c.SeqNAKsRecv
	st.RNRNAKs += c.RNRNAKsSent + c.RNRNAKsRecv
	st.Duplicates += c.Duplicates
	st.QPDropped += c.Dropped
	st.OOO.add(c.OOO)
	st.SR.add(c.SR)
	st.CC.add(c.CC)
}

// ErrClosed is returned by operations on a closed Device.
var ErrClosed = net.ErrClosed

// A Device is one RDMA device over one link. Its methods are safe for
// concurrent use.
type Device struct {
	// removed counts queue pairs taken out of the table: an engine whose
	// timer heap may hold many of them drops them (timerHeap.compact).
	removed atomic.Uint64

	l      link.Link
	props  link.Props
	reason string
	ifname string
	hw     [6]byte
	port   port // GID table and link state (port.go)

	cmOnce sync.Once // creates cmAg, QP1, on first use (cm_agent.go)
	cmAg   *cmAgent
	cmLive atomic.Pointer[cmAgent] // cmAg once made: CMStats reads it without making it
	cmErr  error
	cmReg  cmRegistrar   // who else must know the service IDs listened on (nil: nobody; the daemon's clients: the daemon)
	conns  connRegistrar // who else must know the peers of connected queue pairs (nil: nobody; connreg.go)
	pmtu   wire.MTU
	opts   Options
	tbl    *mr.Table
	epoch  time.Time

	resolve func(netip.Addr) (net.HardwareAddr, error)

	// QPN → entry, two levels of 4096 so lookups need no lock; a chunk is
	// made for its first queue pair and dropped with its last (qpUsed
	// counts them, under mu), so QPNs handed out over a long life do not
	// keep 32 KiB chunks for queue pairs long gone.
	qpTab  [4096]atomic.Pointer[qpChunk]
	qpUsed [4096]uint16

	mu sync.Mutex // guards qps, retired, nextQPN, closed
	// qpnFirst..qpnLast are the QPNs the device hands out.
	qpnFirst, qpnLast uint32
	qps               map[uint32]*qpEntry
	qpsPeak           int   // len(qps) when it was last made (maps do not shrink: removeQP remakes it)
	retired           Stats // counters of destroyed queue pairs
	// retiredQP sums the Snapshot counters of destroyed queue pairs.
	retiredQP qpTotals
	nextQPN   uint32
	closed    bool

	engs []*engine    // the progress engines (engines.go)
	live atomic.Int32 // engines running: the last to end closes done

	closing   atomic.Bool
	linkLost  atomic.Bool // the engine ended because the link did (see engine.run)
	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
	cleanup   []func() error

	st     statCounters
	events asyncQueue   // asynchronous events (events.go)
	srqs   atomic.Int32 // shared receive queues (srq.go)

	ctxPool *qp.ContextPool // OOO contexts (nil until the first OOO queue pair)
	oooQPs  atomic.Int32    // OOO queue pairs alive: the engine accepts OOO opcodes
	srQPs   atomic.Int32    // queue pairs connected with selective repeat: the engine accepts SR opcodes
	groups  groupRoutes     // queue pairs that receive multicast frames (mcast.go)
	join    groupJoiner     // JoinGroup's means (nil: the link cannot join groups)

	shared   *sharedRegions // daemon-shared memory regions (nil: not a daemon client; place.go)
	placeMsg place.Msg      // the placement message being handled (engine goroutine)

	capw        *capture.Writer          // the capture's writer (nil: none)
	xdpCounters func() (Counters, error) // the XDP program's verdict counters (nil: none)
}

type statCounters struct {
	rxFrames, rxBytes, txFrames, txBytes                    atomic.Uint64
	dropBadICRC, dropMalformed, dropNotRoCE, dropUnknownQPN atomic.Uint64
	txNoBuffer, txErrors, rxErrors                          atomic.Uint64
	rounds, wakeups, naps                                   atomic.Uint64
	delivered, txSent, txLost                               atomic.Uint64
	handoffs, handDrops, handStalls                         atomic.Uint64
}

// firstQPN is the first QPN handed out, as rxe does (QP0 and QP1 are special).
const firstQPN = 0x11

// NewDevice makes a Device over l and starts its progress engine. The Device
// owns l from then on and closes it on Close.
func NewDevice(l link.Link, opts *Options) (*Device, error) {
	d, err := newDevice(l, opts, "", "link given to NewDevice")
	if err != nil {
		return nil, fmt.Errorf("roce: %w", err)
	}
	return d, nil
}

func newDevice(l link.Link, opts *Options, ifname, reason string) (*Device, error) {
	if l == nil {
		return nil, errors.New("new device: nil link")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.RxBatch <= 0 {
		o.RxBatch = 64
	}
	if o.RxBatch > 1024 {
		o.RxBatch = 1024
	}
	if o.RxCoalesce == 0 {
		o.RxCoalesce = DefaultRxCoalesce
	}
	if len(o.CPUs) > 0 {
		if err := checkCPUs(o.CPUs); err != nil {
			return nil, fmt.Errorf("new device: %w", err)
		}
		o.CPUs = slices.Clone(o.CPUs)
	}
	props := l.Props()
	if props.MTU < 256+80 {
		return nil, fmt.Errorf("new device: link MTU %d is below the smallest RoCE path MTU (256 + headers)", props.MTU)
	}
	if props.MaxFrame < props.MTU+18 {
		return nil, fmt.Errorf("new device: link transmit buffers of %d bytes cannot hold MTU %d frames", props.MaxFrame, props.MTU)
	}
	var capw *capture.Writer
	if o.Capture != nil {
		w, err := capture.NewWriter(o.Capture, nil)
		if err != nil {
			return nil, fmt.Errorf("new device: %w", err)
		}
		name := ifname
		if name == "" {
			name = props.Name
		}
		capw = w
		l = capture.WrapInterface(l, w, capture.Interface{
			Name:        name,
			Description: "xdproce " + props.Name + ", MTU " + strconv.Itoa(props.MTU),
		})
	}
	d := &Device{
		l:        l,
		props:    props,
		opts:     o,
		tbl:      mr.NewTable(mr.WithMaxMRs(cmp.Or(o.MaxMRs, mr.DefaultMaxMRs))),
		epoch:    time.Now(),
		qps:      make(map[uint32]*qpEntry),
		nextQPN:  firstQPN,
		qpnFirst: firstQPN,
		qpnLast:  0xFFFFFE, // 0xFFFFFF is the multicast QPN
		done:     make(chan struct{}),
		resolve:  o.Resolve,
		pmtu:     wire.PathMTU(props.MTU),
		capw:     capw,
		shared:   o.shared,
	}
	if o.qpns[1] != 0 {
		d.qpnFirst, d.qpnLast, d.nextQPN = o.qpns[0], o.qpns[1], o.qpns[0]
	}
	d.hw = deviceMAC(props.HWAddr, o.HWAddr, o.Addrs)
	d.port.gids = buildGIDTable(d.hw, o.Addrs)
	d.port.up = true
	d.events.init()
	d.ifname, d.reason = ifname, reason
	if err := d.startEngines(); err != nil {
		return nil, fmt.Errorf("new device: %w", err)
	}
	return d, nil
}

// deviceMAC is a device's MAC address: the link's, else the one given in
// Options.HWAddr, else one made from its first address (syntheticMAC).
func deviceMAC(linkHW, optHW net.HardwareAddr, addrs []netip.Addr) [6]byte {
	switch {
	case len(linkHW) == 6:
		return [6]byte(linkHW)
	case len(optHW) == 6:
		return [6]byte(optHW)
	}
	return syntheticMAC(addrs)
}

// syntheticMAC makes a locally administered unicast MAC from the first
// address, so that devices over MAC-less links still have distinct link-local
// GIDs.
func syntheticMAC(addrs []netip.Addr) [6]byte {
	hw := [6]byte{0x02, 0x00, 0, 0, 0, 0}
	if len(addrs) > 0 {
		b := addrs[0].As16()
		copy(hw[2:], b[12:16])
	}
	return hw
}

// LinkName says what carries the frames, e.g. "AF_XDP (native)" or "UDP".
func (d *Device) LinkName() string { return d.props.Name }

// LinkReason says why Open chose the link (for example why AF_XDP was not
// used).
func (d *Device) LinkReason() string { return d.reason }

// Props describes the device's link.
func (d *Device) Props() link.Props { return d.props }

// Name is the interface name given to Open ("" for NewDevice).
func (d *Device) Name() string { return d.ifname }

// HWAddr is the device's MAC address.
func (d *Device) HWAddr() net.HardwareAddr { return net.HardwareAddr(d.hw[:]) }

// PathMTU is the largest IB MTU the link carries (wire.PathMTU of the link MTU).
func (d *Device) PathMTU() MTU { return d.pmtu }

// Stats returns the engine's counters.
func (d *Device) Stats() Stats {
	s := &d.st
	st := Stats{
		RxFrames: s.rxFrames.Load(), RxBytes: s.rxBytes.Load(),
		TxFrames: s.txFrames.Load(), TxBytes: s.txBytes.Load(),
		DropBadICRC: s.dropBadICRC.Load(), DropMalformed: s.dropMalformed.Load(),
		DropNotRoCE: s.dropNotRoCE.Load(), DropUnknownQPN: s.dropUnknownQPN.Load(),
		TxNoBuffer: s.txNoBuffer.Load(),
		TxErrors:   s.txErrors.Load(), RxErrors: s.rxErrors.Load(),
		Rounds: s.rounds.Load(), Wakeups: s.wakeups.Load(), Naps: s.naps.Load(),
		Handoffs: s.handoffs.Load(), HandoffDrops: s.handDrops.Load(), HandoffStalls: s.handStalls.Load(),
	}
	d.mu.Lock()
	st.QPs = len(d.qps)
	st.Retransmits, st.Timeouts, st.SeqNAKs = d.retired.Retransmits, d.retired.Timeouts, d.retired.SeqNAKs
	st.RNRNAKs, st.Duplicates, st.QPDropped = d.retired.RNRNAKs, d.retired.Duplicates, d.retired.QPDropped
	st.FastRetransmits, st.SpuriousFastRetransmits = d.retired.FastRetransmits, d.retired.SpuriousFastRetransmits
	st.OOO = d.retired.OOO
	for _, e := range d.qps {
		addQPStats(&st, e.q)
	}
	d.mu.Unlock()
	return st
}

// now is the engine clock: monotonic nanoseconds, never 0.
func (d *Device) now() int64 { return int64(time.Since(d.epoch)) + int64(time.Second) }

// Close stops the progress engine, moves every queue pair to the error state
// (outstanding work requests complete with WR_FLUSH_ERR), closes the link and
// releases what Open set up. It is idempotent; later calls return the first
// result.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		d.closing.Store(true)
		d.cmOnce.Do(func() {}) // no CM agent from now on
		if d.cmAg != nil {
			d.cmAg.close()
		}
		for _, e := range d.engs {
			e.l.Wake()
		}
		<-d.done
		// The engines have stopped: this goroutine owns the queue pairs now.
		d.mu.Lock()
		ents := make([]*qpEntry, 0, len(d.qps))
		for _, e := range d.qps {
			ents = append(ents, e)
		}
		d.mu.Unlock()
		var discard discardOutput
		now := d.now()
		for _, e := range ents {
			_ = e.q.Modify(&qp.Attr{State: qp.Error}, qp.AttrState)
			e.q.Progress(now, &discard)
			d.removeQP(e)
			_ = e.q.Destroy()
		}
		// The Modify calls above rang doorbells that no engine will drain:
		// drop the entries, or a closed Device still referenced by the
		// application keeps every queue pair's memory.
		for _, e := range d.engs {
			e.readyMu.Lock()
			clear(e.posted)
			e.posted = nil
			e.readyMu.Unlock()
		}
		var errs []error
		if err := d.l.Close(); err != nil && !errors.Is(err, link.ErrClosed) {
			errs = append(errs, fmt.Errorf("roce: close link: %w", err))
		}
		for i := len(d.cleanup) - 1; i >= 0; i-- {
			if err := d.cleanup[i](); err != nil {
				errs = append(errs, err)
			}
		}
		d.closeErr = errors.Join(errs...)
		d.events.close() // after cleanup, which ends the interface watcher
	})
	return d.closeErr
}

// ErrLinkLost is wrapped by the errors of a Device whose link ended by
// itself (the xdproce daemon it was attached to exited); it matches
// ErrClosed too.
var ErrLinkLost error = linkLost{}

type linkLost struct{}

func (linkLost) Error() string        { return "device closed: its link is gone (xdproce daemon exited?)" }
func (linkLost) Is(target error) bool { return target == ErrClosed }

// closedErr is the error of a verb on a closed device.
func (d *Device) closedErr() error {
	if d.linkLost.Load() {
		return ErrLinkLost
	}
	return ErrClosed
}

// discardOutput drops frames: used to let queue pairs flush after the engine
// stopped.
type discardOutput struct{}

func (o *discardOutput) TxBuffer() []byte      { return nil }
func (o *discardOutput) TxCommit(frame []byte) {}
