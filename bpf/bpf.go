package bpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// ErrBusy is returned (wrapped) by Attach when another XDP program is already
// attached to the interface.
var ErrBusy = errors.New("interface already has an XDP program")

// Mode is an XDP attach mode.
type Mode int

const (
	// ModeAuto tries native mode, then generic mode.
	ModeAuto Mode = iota
	// ModeNative runs the program in the driver (XDP_FLAGS_DRV_MODE).
	ModeNative
	// ModeGeneric runs it on the skb path (XDP_FLAGS_SKB_MODE), for any device.
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Verdict is what the program decided for a frame; it indexes Counters.
type Verdict int

// The verdicts, in the order of xdp.c's enum verdict.
const (
	Redirected Verdict = iota // sent to the AF_XDP socket of the rx queue
	NoSocket                  // RoCE for this device but no socket on the queue: passed
	NotIP                     // neither IPv4 nor IPv6 (ARP, ...): passed
	NotRoCE                   // IP but not UDP to port 4791: passed
	NotLocal                  // RoCE to an address not in the local set: passed
	Truncated                 // headers cut short or malformed: passed
	Fragment                  // an IP fragment: passed
	NumVerdicts
)

var verdictNames = [NumVerdicts]string{"redirected", "no-socket", "not-ip", "not-roce", "not-local", "truncated", "fragment"}

func (v Verdict) String() string {
	if v >= 0 && v < NumVerdicts {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Counter counts the frames of one verdict.
type Counter struct{ Packets, Bytes uint64 }

// Counters holds a Counter per Verdict, summed over CPUs.
type Counters [NumVerdicts]Counter

// Passed is the number of frames handed to the kernel stack.
func (c *Counters) Passed() uint64 {
	var n uint64
	for v := NoSocket; v < NumVerdicts; v++ {
		n += c[v].Packets
	}
	return n
}

// Program is the loaded steering program, attached to at most one interface.
type Program struct {
	mu      sync.Mutex
	objs    steerObjects
	link    link.Link
	mode    Mode
	ifindex int
	closed  bool
}

// Load loads the program and its maps into the kernel without attaching it.
func Load() (*Program, error) {
	_ = rlimit.RemoveMemlock() // only matters before 5.11; errors surface at load
	p := &Program{}
	if err := loadSteerObjects(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) && len(ve.Log) > 0 {
			// Refused by the verifier: the capabilities were there, the
			// program does something they do not allow.
			return nil, fmt.Errorf("bpf: load steering program: the verifier refused it: %w", err)
		}
		if errors.Is(err, unix.EPERM) || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("bpf: load steering program: %w (needs CAP_BPF and CAP_NET_ADMIN, or root; before Linux 5.11 also RLIMIT_MEMLOCK raised or CAP_IPC_LOCK)", err)
		}
		return nil, fmt.Errorf("bpf: load steering program: %w", err)
	}
	return p, nil
}

// Options configures Attach.
type Options struct {
	// Mode is the attach mode; the zero value tries native, then generic.
	Mode Mode
}

// Attach loads the program, fills the local addresses and the sockets
// (xskFDs[q] is the AF_XDP socket of rx queue q, or negative for none) and
// attaches it to the interface. opts may be nil.
func Attach(ifname string, localIPs []netip.Addr, xskFDs []int, opts *Options) (*Program, error) {
	if opts == nil {
		opts = &Options{}
	}
	p, err := Load()
	if err != nil {
		return nil, err
	}
	for _, ip := range localIPs {
		if err := p.AddLocalIP(ip); err != nil {
			p.Close()
			return nil, err
		}
	}
	for q, fd := range xskFDs {
		if fd < 0 {
			continue
		}
		if err := p.SetSocket(q, fd); err != nil {
			p.Close()
			return nil, err
		}
	}
	if err := p.Attach(ifname, opts.Mode); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Attach attaches the loaded program to the interface through a bpf_link.
func (p *Program) Attach(ifname string, mode Mode) error {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("bpf: attach: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("bpf: attach to %s: %w", ifname, net.ErrClosed)
	}
	if p.link != nil {
		return fmt.Errorf("bpf: attach to %s: already attached to ifindex %d", ifname, p.ifindex)
	}
	try := func(m Mode) error {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.XdpSteer, Interface: ifi.Index, Flags: flags})
		if err != nil {
			return err
		}
		p.link, p.mode, p.ifindex = l, m, ifi.Index
		return nil
	}
	var errNative error
	if mode == ModeAuto || mode == ModeNative {
		errNative = try(ModeNative)
		if errNative == nil {
			return nil
		}
		if mode == ModeNative || !(errors.Is(errNative, unix.ERANGE) || errors.Is(errNative, unix.EOPNOTSUPP) ||
			errors.Is(errNative, unix.EINVAL) || errors.Is(errNative, errENOTSUPP)) {
			return attachError(ifname, ModeNative, errNative)
		}
	}
	if err := try(ModeGeneric); err != nil {
		if errNative != nil {
			return fmt.Errorf("%w (native mode: %v)", attachError(ifname, ModeGeneric, err), errNative)
		}
		return attachError(ifname, ModeGeneric, err)
	}
	return nil
}

func attachError(ifname string, m Mode, err error) error {
	switch {
	case errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST):
		return fmt.Errorf("bpf: attach to %s (%s mode): %w: %w", ifname, m, ErrBusy, err)
	case errors.Is(err, unix.EPERM) || errors.Is(err, os.ErrPermission):
		return fmt.Errorf("bpf: attach to %s (%s mode): %w (needs CAP_NET_ADMIN and CAP_BPF, or root)", ifname, m, err)
	}
	return fmt.Errorf("bpf: attach to %s (%s mode): %w", ifname, m, err)
}

// Mode reports the mode the program is attached in (ModeAuto when not attached).
func (p *Program) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// AddLocalIP adds an address whose RoCE traffic is redirected. IPv4-mapped
// IPv6 addresses count as IPv4.
func (p *Program) AddLocalIP(ip netip.Addr) error {
	ip = ip.Unmap()
	var err error
	switch {
	case ip.Is4():
		a := ip.As4()
		err = p.objs.LocalV4.Put(a, uint8(1))
	case ip.Is6():
		err = p.objs.LocalV6.Put(steerIn6{B: ip.As16()}, uint8(1))
	default:
		return fmt.Errorf("bpf: add local address: invalid address %v", ip)
	}
	if err != nil {
		return fmt.Errorf("bpf: add local address %v: %w", ip, err)
	}
	return nil
}

// RemoveLocalIP removes an address added with AddLocalIP.
func (p *Program) RemoveLocalIP(ip netip.Addr) error {
	ip = ip.Unmap()
	var err error
	switch {
	case ip.Is4():
		a := ip.As4()
		err = p.objs.LocalV4.Delete(a)
	case ip.Is6():
		err = p.objs.LocalV6.Delete(steerIn6{B: ip.As16()})
	default:
		return fmt.Errorf("bpf: remove local address: invalid address %v", ip)
	}
	if err != nil {
		return fmt.Errorf("bpf: remove local address %v: %w", ip, err)
	}
	return nil
}

// SetSocket registers the AF_XDP socket fd for rx queue q.
func (p *Program) SetSocket(q, fd int) error {
	if q < 0 || uint32(q) >= p.objs.Xsks.MaxEntries() {
		return fmt.Errorf("bpf: set socket: queue %d outside 0..%d", q, p.objs.Xsks.MaxEntries()-1)
	}
	if err := p.objs.Xsks.Put(uint32(q), uint32(fd)); err != nil {
		return fmt.Errorf("bpf: set socket for queue %d: %w", q, err)
	}
	return nil
}

// RemoveSocket unregisters the socket of rx queue q; its RoCE frames go to
// the kernel (NoSocket) from then on.
func (p *Program) RemoveSocket(q int) error {
	if err := p.objs.Xsks.Delete(uint32(q)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("bpf: remove socket for queue %d: %w", q, err)
	}
	return nil
}

// Counters reads the per-verdict counters, summed over CPUs.
func (p *Program) Counters() (Counters, error) {
	var c Counters
	var per []steerCounter
	for v := range NumVerdicts {
		if err := p.objs.Stats.Lookup(uint32(v), &per); err != nil {
			return c, fmt.Errorf("bpf: read counters: %w", err)
		}
		for _, x := range per {
			c[v].Packets += x.Packets
			c[v].Bytes += x.Bytes
		}
	}
	return c, nil
}

// Close detaches the program (if attached) and releases it. Later calls do
// nothing.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	if p.link != nil {
		if err := p.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("bpf: detach: %w", err))
		}
		p.link = nil
	}
	if err := p.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("bpf: close: %w", err))
	}
	return errors.Join(errs...)
}

// errENOTSUPP is the kernel-internal ENOTSUPP (524) some drivers leak.
const errENOTSUPP = unix.Errno(524)
