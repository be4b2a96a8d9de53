package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// pcapng block types and option codes (draft-ietf-opsawg-pcapng).
const (
	blockSHB = 0x0A0D0D0A // Section Header Block
	blockIDB = 0x00000001 // Interface Description Block
	blockPB  = 0x00000002 // Packet Block (obsolete)
	blockSPB = 0x00000003 // Simple Packet Block
	blockEPB = 0x00000006 // Enhanced Packet Block

	byteOrderMagic = 0x1A2B3C4D

	optEndOfOpt   = 0
	optComment    = 1
	optSHBUserApp = 4
	optIfName     = 2
	optIfDesc     = 3
	optIfTSResol  = 9
	optIfTSOffset = 14
	optEPBFlags   = 2
)

// LinkType is a pcap/pcapng link-layer header type (LINKTYPE_* of tcpdump.org).
type LinkType uint16

// LinkTypeEthernet is LINKTYPE_ETHERNET, the only link type the Writer emits.
const LinkTypeEthernet LinkType = 1

// Direction says whether a frame was received or sent, as the low two bits of
// a pcapng epb_flags option: 00 unknown, 01 inbound, 10 outbound.
type Direction uint8

// Directions.
const (
	DirUnknown  Direction = 0 // not recorded (pcap files, blocks without epb_flags)
	DirInbound  Direction = 1 // received by the capturing interface
	DirOutbound Direction = 2 // sent by the capturing interface
)

// String returns "in", "out" or "?".
func (d Direction) String() string {
	switch d {
	case DirInbound:
		return "in"
	case DirOutbound:
		return "out"
	}
	return "?"
}

// Interface describes one capture interface (a pcapng Interface Description
// Block).
type Interface struct {
	Name        string   // if_name, e.g. "veth0"; may be empty
	Description string   // if_description, e.g. "xdproce AF_XDP (native)"; may be empty
	LinkType    LinkType // the Writer always writes LinkTypeEthernet
}

// WriterOptions configures a Writer. A nil *WriterOptions means defaults.
type WriterOptions struct {
	// Application is written as the section header's shb_userappl option;
	// empty means "xdproce".
	Application string
}

// Errors of the Writer. Per-frame errors are these values, never new ones.
var (
	// ErrNoInterface: a frame names an interface that was not added.
	ErrNoInterface = errors.New("capture: no such interface")
	// ErrFrameTooLarge: a frame is longer than a pcapng block can hold.
	ErrFrameTooLarge = errors.New("capture: frame too large")
)

// maxFrame bounds one recorded frame (pcapng readers commonly refuse blocks
// above 16 MiB; our frames are at most a few KiB).
const maxFrame = 1 << 20

// A Writer writes a pcapng file: a Section Header Block when created, one
// Interface Description Block per AddInterface (link type Ethernet, timestamp
// resolution nanoseconds: if_tsresol = 9), and one Enhanced Packet Block per
// WritePacket with the frame's direction in epb_flags.
//
// Output is buffered (64 KiB): call Flush before closing the underlying file,
// or the tail of the capture is lost. A long-running recorder may also call
// Flush from time to time (from any goroutine) to bound what a crash loses. Errors are sticky: after a failed write every
// later call returns the same error, and Err reports it, so a caller that
// ignores per-frame errors (as Wrap does) still learns of the failure at Flush.
//
// A Writer is safe for concurrent use (a mutex serialises the blocks), so
// several wrapped links may share one file. WritePacket does not allocate.
type Writer struct {
	mu     sync.Mutex
	bw     *bufio.Writer
	nIface int
	err    error
	hdr    [40]byte // scratch for block headers and trailers
}

// NewWriter starts a pcapng section on w and returns a Writer for it. The
// section header is buffered like everything else; Flush writes it out.
func NewWriter(w io.Writer, opts *WriterOptions) (*Writer, error) {
	app := "xdproce"
	if opts != nil && opts.Application != "" {
		app = opts.Application
	}
	cw := &Writer{bw: bufio.NewWriterSize(w, 64<<10)}
	// SHB: type, length, byte-order magic, version 1.0, section length -1
	// (unknown), options, length.
	body := 16 + optLen(len(app)) + 4
	total := 8 + body + 4
	b := cw.hdr[:24]
	le.PutUint32(b[0:], blockSHB)
	le.PutUint32(b[4:], uint32(total))
	le.PutUint32(b[8:], byteOrderMagic)
	le.PutUint16(b[12:], 1)
	le.PutUint16(b[14:], 0)
	le.PutUint64(b[16:], ^uint64(0))
	cw.write(b)
	cw.writeStringOpt(optSHBUserApp, app)
	cw.writeEndOpt()
	cw.writeU32(uint32(total))
	if cw.err != nil {
		return nil, fmt.Errorf("capture: write section header: %w", cw.err)
	}
	return cw, nil
}

var le = binary.LittleEndian

// optLen is the size of one option carrying n bytes of value, with padding.
func optLen(n int) int { return 4 + (n+3)&^3 }

// AddInterface writes an Interface Description Block for ifc (link type
// Ethernet, no snapshot limit, nanosecond timestamps) and returns the
// interface's index for WritePacket.
func (w *Writer) AddInterface(ifc Interface) (int, error) {
	if len(ifc.Name) > 0xFFFF || len(ifc.Description) > 0xFFFF {
		return 0, errors.New("capture: add interface: name or description longer than 65535 bytes")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	opts := 0
	if ifc.Name != "" {
		opts += optLen(len(ifc.Name))
	}
	if ifc.Description != "" {
		opts += optLen(len(ifc.Description))
	}
	opts += optLen(1) + 4 // if_tsresol, opt_endofopt
	total := 8 + 8 + opts + 4
	b := w.hdr[:16]
	le.PutUint32(b[0:], blockIDB)
	le.PutUint32(b[4:], uint32(total))
	le.PutUint16(b[8:], uint16(LinkTypeEthernet))
	le.PutUint16(b[10:], 0)
	le.PutUint32(b[12:], 0) // snaplen 0: no limit
	w.write(b)
	if ifc.Name != "" {
		w.writeStringOpt(optIfName, ifc.Name)
	}
	if ifc.Description != "" {
		w.writeStringOpt(optIfDesc, ifc.Description)
	}
	o := w.hdr[:8]
	le.PutUint16(o[0:], optIfTSResol)
	le.PutUint16(o[2:], 1)
	o[4], o[5], o[6], o[7] = 9, 0, 0, 0 // 10^-9 s
	w.write(o)
	w.writeEndOpt()
	w.writeU32(uint32(total))
	if w.err != nil {
		return 0, fmt.Errorf("capture: add interface: %w", w.err)
	}
	id := w.nIface
	w.nIface++
	return id, nil
}

// WritePacket writes frame as an Enhanced Packet Block on interface iface
// with timestamp ts (nanoseconds since the Unix epoch are stored) and
// direction dir (DirUnknown writes no epb_flags option). It does not allocate.
// The frame is copied into the Writer's buffer; the caller may reuse it.
func (w *Writer) WritePacket(iface int, ts time.Time, dir Direction, frame []byte) error {
	return w.WritePacketNanos(iface, ts.UnixNano(), dir, frame)
}

// WritePacketNanos is WritePacket with the timestamp given in nanoseconds
// since the Unix epoch.
func (w *Writer) WritePacketNanos(iface int, ns int64, dir Direction, frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeEPB(iface, ns, dir, frame)
}

// writeBatch writes frames under one lock, stopping at the first error.
func (w *Writer) writeBatch(iface int, ns int64, dir Direction, frames [][]byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range frames {
		if err := w.writeEPB(iface, ns, dir, f); err != nil {
			return err
		}
	}
	return nil
}

// writeEPB writes one Enhanced Packet Block; w.mu is held.
func (w *Writer) writeEPB(iface int, ns int64, dir Direction, frame []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(frame) > maxFrame {
		return ErrFrameTooLarge
	}
	if iface < 0 || iface >= w.nIface {
		return ErrNoInterface
	}
	pad := (4 - len(frame)&3) & 3
	opts := 0
	if dir&3 != 0 {
		opts = 8 + 4 // epb_flags, opt_endofopt
	}
	total := 28 + len(frame) + pad + opts + 4
	b := w.hdr[:28]
	t := uint64(ns)
	le.PutUint32(b[0:], blockEPB)
	le.PutUint32(b[4:], uint32(total))
	le.PutUint32(b[8:], uint32(iface))
	le.PutUint32(b[12:], uint32(t>>32))
	le.PutUint32(b[16:], uint32(t))
	le.PutUint32(b[20:], uint32(len(frame)))
	le.PutUint32(b[24:], uint32(len(frame)))
	w.write(b)
	w.write(frame)
	if opts != 0 {
		// Padding, epb_flags (code 2, length 4, value) and opt_endofopt in one go.
		p := w.hdr[:pad+12]
		clear(p[:pad])
		le.PutUint16(p[pad:], optEPBFlags)
		le.PutUint16(p[pad+2:], 4)
		le.PutUint32(p[pad+4:], uint32(dir&3))
		le.PutUint32(p[pad+8:], 0)
		w.write(p)
	} else if pad != 0 {
		p := w.hdr[:pad]
		clear(p)
		w.write(p)
	}
	w.writeU32(uint32(total))
	return w.err
}

// Flush writes buffered blocks to the underlying writer. It must be called
// before the underlying file is closed. It returns the first error any call
// met (errors are sticky).
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = fmt.Errorf("capture: flush: %w", err)
	}
	return w.err
}

// fail records err as the sticky error unless one is already recorded.
func (w *Writer) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// Err returns the first error met by any call, or nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Interfaces returns how many interfaces have been added.
func (w *Writer) Interfaces() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nIface
}

// write appends b to the buffer, remembering the first error. w.mu is held
// (or the Writer is not yet shared).
func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	if _, err := w.bw.Write(b); err != nil {
		w.err = fmt.Errorf("capture: write: %w", err)
	}
}

func (w *Writer) writeU32(v uint32) {
	b := w.hdr[36:40]
	le.PutUint32(b, v)
	w.write(b)
}

func (w *Writer) writeEndOpt() { w.writeU32(0) }

// writeStringOpt writes one option with a string value and its padding.
func (w *Writer) writeStringOpt(code uint16, s string) {
	o := w.hdr[:4]
	le.PutUint16(o[0:], code)
	le.PutUint16(o[2:], uint16(len(s)))
	w.write(o)
	if w.err == nil {
		if _, err := w.bw.WriteString(s); err != nil {
			w.err = fmt.Errorf("capture: write: %w", err)
		}
	}
	if pad := (4 - len(s)&3) & 3; pad != 0 {
		p := w.hdr[:pad]
		clear(p)
		w.write(p)
	}
}
