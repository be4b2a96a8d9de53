package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Errors of the Reader (match with errors.Is).
var (
	// ErrNotCapture: the input does not start with a pcap or pcapng magic number.
	ErrNotCapture = errors.New("capture: not a pcap or pcapng file")
	// ErrTruncated: the input ends inside a header or block.
	ErrTruncated = errors.New("capture: truncated file")
	// ErrMalformed: a header or block is inconsistent (bad length, unknown
	// interface, bad byte-order magic...).
	ErrMalformed = errors.New("capture: malformed file")
)

// Format names a capture file format.
type Format uint8

// Formats.
const (
	FormatPcap   Format = iota + 1 // libpcap, micro- or nanosecond, either byte order
	FormatPcapng                   // pcapng, one or more sections, either byte order
)

// String returns "pcap" or "pcapng".
func (f Format) String() string {
	switch f {
	case FormatPcap:
		return "pcap"
	case FormatPcapng:
		return "pcapng"
	}
	return "unknown"
}

// Frame is one frame read from a capture.
type Frame struct {
	// Data is the captured bytes. It aliases the Reader's buffer and is valid
	// until the next call to Next.
	Data []byte
	// OrigLen is the frame's length on the wire (≥ len(Data)).
	OrigLen int
	// Time is the capture timestamp.
	Time time.Time
	// Dir is the direction from pcapng epb_flags; DirUnknown for pcap files
	// and blocks without the option.
	Dir Direction
	// LinkType is the link-layer header type of the frame's interface.
	LinkType LinkType
	// Interface is the pcapng interface index (0 for pcap files).
	Interface int
	// Index counts frames from 1 in file order.
	Index int
}

// maxBlock bounds the size of one block or record we are willing to read.
const maxBlock = 64 << 20

type ngIface struct {
	Interface
	tsUnit   int64 // nanoseconds per tick when tsScale is 0
	tsDiv    int64 // ticks per nanosecond divisor for resolutions finer than 1 ns
	tsBinary uint8 // power-of-two resolution exponent, 0 if decimal
	tsOffset int64 // seconds
}

// A Reader reads frames from a pcap or pcapng stream, detected by its magic
// number. It is not safe for concurrent use.
type Reader struct {
	r      *bufio.Reader
	format Format
	order  binary.ByteOrder
	buf    []byte
	n      int // frames returned so far

	// pcap
	linkType LinkType
	nanos    bool

	// pcapng
	ifaces []ngIface
}

// NewReader reads the file header from r and returns a Reader positioned at
// the first frame. A stream that is neither pcap nor pcapng gives
// ErrNotCapture.
func NewReader(r io.Reader) (*Reader, error) {
	cr := &Reader{r: bufio.NewReaderSize(r, 64<<10)}
	magic, err := cr.r.Peek(4)
	if err != nil {
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || err == bufio.ErrBufferFull {
			return nil, ErrNotCapture
		}
		return nil, fmt.Errorf("capture: read: %w", err)
	}
	switch binary.LittleEndian.Uint32(magic) {
	case 0xA1B2C3D4, 0xA1B23C4D, 0xD4C3B2A1, 0x4D3CB2A1:
		cr.format = FormatPcap
		if err := cr.readPcapHeader(); err != nil {
			return nil, err
		}
	case blockSHB:
		cr.format = FormatPcapng
		if err := cr.readSHB(); err != nil {
			return nil, err
		}
	default:
		return nil, ErrNotCapture
	}
	return cr, nil
}

// Format reports whether the stream is pcap or pcapng.
func (r *Reader) Format() Format { return r.format }

// Interfaces returns the interfaces described so far (one for pcap files).
func (r *Reader) Interfaces() []Interface {
	if r.format == FormatPcap {
		return []Interface{{LinkType: r.linkType}}
	}
	out := make([]Interface, len(r.ifaces))
	for i, ifc := range r.ifaces {
		out[i] = ifc.Interface
	}
	return out
}

func (r *Reader) readFull(n int) ([]byte, error) {
	if n > maxBlock {
		return nil, fmt.Errorf("%w: record of %d bytes", ErrMalformed, n)
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n, max(n, 4096))
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.r, b); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, ErrTruncated
		}
		return nil, fmt.Errorf("capture: read: %w", err)
	}
	return b, nil
}

func (r *Reader) readPcapHeader() error {
	h, err := r.readFull(24)
	if err != nil {
		return err
	}
	switch binary.LittleEndian.Uint32(h) {
	case 0xA1B2C3D4:
		r.order = binary.LittleEndian
	case 0xA1B23C4D:
		r.order, r.nanos = binary.LittleEndian, true
	case 0xD4C3B2A1:
		r.order = binary.BigEndian
	case 0x4D3CB2A1:
		r.order, r.nanos = binary.BigEndian, true
	}
	if major := r.order.Uint16(h[4:]); major != 2 {
		return fmt.Errorf("%w: pcap version %d", ErrMalformed, major)
	}
	// The link type is the low 16 bits of the last word (the upper bits carry
	// FCS information in some writers).
	r.linkType = LinkType(r.order.Uint32(h[20:]) & 0xFFFF)
	return nil
}

// Next reads the next frame into f. It returns io.EOF at the end of the
// stream, ErrTruncated (wrapped, with the frame number) if the stream ends
// inside a record, and ErrMalformed for an inconsistent record.
func (r *Reader) Next(f *Frame) error {
	var err error
	if r.format == FormatPcap {
		err = r.nextPcap(f)
	} else {
		err = r.nextPcapng(f)
	}
	if err != nil {
		if err == io.EOF {
			return io.EOF
		}
		return fmt.Errorf("frame %d: %w", r.n+1, err)
	}
	r.n++
	f.Index = r.n
	return nil
}

// atEOF reports whether the stream ends here (no byte left).
func (r *Reader) atEOF() (bool, error) {
	_, err := r.r.Peek(1)
	if err == io.EOF {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("capture: read: %w", err)
	}
	return false, nil
}

func (r *Reader) nextPcap(f *Frame) error {
	if eof, err := r.atEOF(); eof || err != nil {
		if eof {
			return io.EOF
		}
		return err
	}
	h, err := r.readFull(16)
	if err != nil {
		return err
	}
	sec := int64(r.order.Uint32(h[0:]))
	frac := int64(r.order.Uint32(h[4:]))
	incl := r.order.Uint32(h[8:])
	orig := r.order.Uint32(h[12:])
	if incl > maxBlock {
		return fmt.Errorf("%w: record of %d bytes", ErrMalformed, incl)
	}
	if !r.nanos {
		frac *= 1000
	}
	data, err := r.readFull(int(incl))
	if err != nil {
		return err
	}
	*f = Frame{
		Data:     data,
		OrigLen:  int(max(orig, incl)),
		Time:     time.Unix(sec, frac).UTC(),
		LinkType: r.linkType,
	}
	return nil
}

// readSHB reads a Section Header Block, setting the byte order.
func (r *Reader) readSHB() error {
	h, err := r.readFull(12)
	if err != nil {
		return err
	}
	switch binary.LittleEndian.Uint32(h[8:]) {
	case byteOrderMagic:
		r.order = binary.LittleEndian
	case 0x4D3C2B1A:
		r.order = binary.BigEndian
	default:
		return fmt.Errorf("%w: bad pcapng byte-order magic", ErrMalformed)
	}
	total := r.order.Uint32(h[4:])
	if total < 28 || total%4 != 0 {
		return fmt.Errorf("%w: section header length %d", ErrMalformed, total)
	}
	rest, err := r.readFull(int(total) - 12)
	if err != nil {
		return err
	}
	if major := r.order.Uint16(rest[0:]); major != 1 {
		return fmt.Errorf("%w: pcapng version %d", ErrMalformed, major)
	}
	if r.order.Uint32(rest[len(rest)-4:]) != total {
		return fmt.Errorf("%w: section header trailer length mismatch", ErrMalformed)
	}
	r.ifaces = r.ifaces[:0] // interfaces are per section
	return nil
}

func (r *Reader) nextPcapng(f *Frame) error {
	for {
		if eof, err := r.atEOF(); eof || err != nil {
			if eof {
				return io.EOF
			}
			return err
		}
		h, err := r.r.Peek(8)
		if err != nil {
			return ErrTruncated
		}
		if binary.LittleEndian.Uint32(h) == blockSHB {
			if err := r.readSHB(); err != nil {
				return err
			}
			continue
		}
		typ := r.order.Uint32(h[0:])
		total := r.order.Uint32(h[4:])
		if total < 12 || total%4 != 0 {
			return fmt.Errorf("%w: block length %d (want a multiple of 4, at least 12)", ErrMalformed, total)
		}
		blk, err := r.readFull(int(total))
		if err != nil {
			return err
		}
		if r.order.Uint32(blk[len(blk)-4:]) != total {
			return fmt.Errorf("%w: block trailer length mismatch", ErrMalformed)
		}
		body := blk[8 : len(blk)-4]
		switch typ {
		case blockIDB:
			if err := r.parseIDB(body); err != nil {
				return err
			}
		case blockEPB, blockPB:
			return r.parseEPB(typ, body, f)
		case blockSPB:
			if len(r.ifaces) == 0 {
				return fmt.Errorf("%w: packet before any interface description", ErrMalformed)
			}
			if len(body) < 4 {
				return fmt.Errorf("%w: short simple packet block", ErrMalformed)
			}
			orig := int(r.order.Uint32(body))
			data := body[4:]
			if orig < len(data) {
				data = data[:orig]
			}
			*f = Frame{Data: data, OrigLen: orig, LinkType: r.ifaces[0].LinkType}
			return nil
		}
		// Other blocks (name resolution, statistics, custom...) are skipped.
	}
}

func (r *Reader) parseIDB(body []byte) error {
	if len(body) < 8 {
		return fmt.Errorf("%w: short interface description block", ErrMalformed)
	}
	ifc := ngIface{tsUnit: 1000} // default resolution: microseconds
	ifc.LinkType = LinkType(r.order.Uint16(body[0:]))
	err := r.walkOptions(body[8:], func(code uint16, v []byte) error {
		switch code {
		case optIfName:
			ifc.Name = string(v)
		case optIfDesc:
			ifc.Description = string(v)
		case optIfTSResol:
			if len(v) < 1 {
				return fmt.Errorf("%w: empty if_tsresol", ErrMalformed)
			}
			res := v[0]
			if res&0x80 != 0 {
				e := res & 0x7F
				if e > 62 {
					return fmt.Errorf("%w: if_tsresol 2^-%d", ErrMalformed, e)
				}
				ifc.tsBinary, ifc.tsUnit = e, 0
				return nil
			}
			if res > 18 {
				return fmt.Errorf("%w: if_tsresol 10^-%d", ErrMalformed, res)
			}
			if res <= 9 {
				ifc.tsUnit = pow10(9 - int(res))
			} else {
				ifc.tsUnit, ifc.tsDiv = 0, pow10(int(res)-9)
			}
		case optIfTSOffset:
			if len(v) < 8 {
				return fmt.Errorf("%w: short if_tsoffset", ErrMalformed)
			}
			ifc.tsOffset = int64(r.order.Uint64(v))
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.ifaces = append(r.ifaces, ifc)
	return nil
}

func pow10(n int) int64 {
	v := int64(1)
	for range n {
		v *= 10
	}
	return v
}

func (r *Reader) parseEPB(typ uint32, body []byte, f *Frame) error {
	if len(body) < 20 {
		return fmt.Errorf("%w: short packet block", ErrMalformed)
	}
	var id int
	if typ == blockPB {
		id = int(r.order.Uint16(body[0:]))
	} else {
		id = int(r.order.Uint32(body[0:]))
	}
	if id >= len(r.ifaces) {
		return fmt.Errorf("%w: packet on undescribed interface %d", ErrMalformed, id)
	}
	ifc := &r.ifaces[id]
	ts := uint64(r.order.Uint32(body[4:]))<<32 | uint64(r.order.Uint32(body[8:]))
	capLen := r.order.Uint32(body[12:])
	orig := r.order.Uint32(body[16:])
	padded := (uint64(capLen) + 3) &^ 3
	if padded > uint64(len(body)-20) {
		return fmt.Errorf("%w: captured length %d exceeds block", ErrMalformed, capLen)
	}
	data := body[20 : 20+capLen]
	var flags uint32
	err := r.walkOptions(body[20+padded:], func(code uint16, v []byte) error {
		// epb_flags; the obsolete Packet Block's pack_flags has the same code and layout.
		if code == optEPBFlags {
			if len(v) < 4 {
				return fmt.Errorf("%w: short epb_flags", ErrMalformed)
			}
			flags = r.order.Uint32(v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	*f = Frame{
		Data:      data,
		OrigLen:   int(max(orig, capLen)),
		Time:      ifc.time(ts),
		Dir:       Direction(flags & 3),
		LinkType:  ifc.LinkType,
		Interface: id,
	}
	return nil
}

func (ifc *ngIface) time(ts uint64) time.Time {
	var ns int64
	switch {
	case ifc.tsUnit != 0:
		if ts > math.MaxInt64/uint64(ifc.tsUnit) {
			ns = math.MaxInt64
		} else {
			ns = int64(ts) * ifc.tsUnit
		}
	case ifc.tsDiv != 0:
		ns = int64(ts / uint64(ifc.tsDiv))
	default: // 2^-e seconds per tick
		e := ifc.tsBinary
		sec := ts >> e
		frac := ts & (1<<e - 1)
		if e > 32 { // keep frac*1e9 within 64 bits
			frac, e = frac>>(e-32), 32
		}
		ns = int64(sec)*1e9 + int64((frac*1e9)>>e)
	}
	return time.Unix(ifc.tsOffset, ns).UTC()
}

// walkOptions calls fn for each option in b until opt_endofopt or the end.
func (r *Reader) walkOptions(b []byte, fn func(code uint16, v []byte) error) error {
	for len(b) >= 4 {
		code := r.order.Uint16(b[0:])
		n := int(r.order.Uint16(b[2:]))
		if code == optEndOfOpt {
			return nil
		}
		if 4+n > len(b) {
			return fmt.Errorf("%w: option %d overruns its block", ErrMalformed, code)
		}
		if err := fn(code, b[4:4+n]); err != nil {
			return err
		}
		adv := 4 + (n+3)&^3
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
	}
	return nil
}
