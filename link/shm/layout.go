package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The memfd of a port, in order:
//
//	header     one page: magic, version, MTU, ring size, transmit buffers, slot size,
//	           total size (little-endian; written by the creator, read once
//	           by the attacher)
//	control    per direction, three 128-byte lines: the producer's tail, the
//	           consumer's head, the consumer's need-wakeup flag (uint32 each)
//	descriptors per direction, Ring × 8 bytes: offset (low 32 bits) and
//	           length (high 32 bits) of a frame in that direction's area
//	frames     per direction (page-aligned), (Ring+Buffers) × slot size bytes
//
// Direction 0 carries frames from the creator to the attacher, direction 1
// the other way.
const (
	magic      = 0x3130_4d48_5350_4458 // "XDPSHM01" little-endian
	version    = 1
	pageSize   = 4096
	lineSize   = 128 // two cache lines: adjacent-line prefetch stays off the other index
	ctlSize    = 3 * lineSize
	tailOff    = 0
	headOff    = lineSize
	needOff    = 2 * lineSize
	descSize   = 8
	slotAlign  = 64
	minFrame   = 14 // an Ethernet header
	headerSize = 40
	maxTotal   = 1 << 30
)

// layout is where everything of a port lives in its memfd.
type layout struct {
	mtu, ring, buffers, slots, slotSize, maxFrame int
	ctl, desc, area                               [2]int
	total                                         int
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func newLayout(c Config) (layout, error) {
	l := layout{mtu: c.MTU, ring: c.Ring, buffers: c.Buffers, slots: c.Ring + c.Buffers, maxFrame: c.MTU + 18}
	l.slotSize = roundUp(l.maxFrame, slotAlign)
	off := pageSize
	for d := range 2 {
		l.ctl[d] = off
		off += ctlSize
		l.desc[d] = off
		off += l.ring * descSize
	}
	off = roundUp(off, pageSize)
	for d := range 2 {
		l.area[d] = off
		off = roundUp(off+l.slots*l.slotSize, pageSize)
	}
	l.total = off
	if l.total > maxTotal {
		return l, fmt.Errorf("port of %d bytes over the %d limit (MTU %d, %d slots)", l.total, maxTotal, c.MTU, l.slots)
	}
	return l, nil
}

// putHeader writes the header into h (the first page of the mapping).
func (l *layout) putHeader(h []byte) {
	le := binary.LittleEndian
	le.PutUint64(h[0:], magic)
	le.PutUint32(h[8:], version)
	le.PutUint32(h[12:], uint32(l.mtu))
	le.PutUint32(h[16:], uint32(l.ring))
	le.PutUint32(h[20:], uint32(l.buffers))
	le.PutUint32(h[24:], uint32(l.slotSize))
	le.PutUint64(h[32:], uint64(l.total))
}

// parseHeader checks a header copied out of the shared memory against the
// memfd's size and returns its layout.
func parseHeader(h *[headerSize]byte, size int64) (layout, error) {
	le := binary.LittleEndian
	if le.Uint64(h[0:]) != magic {
		return layout{}, errors.New("not an xdproce shm port (bad magic)")
	}
	if v := le.Uint32(h[8:]); v != version {
		return layout{}, fmt.Errorf("port version %d, want %d", v, version)
	}
	c := Config{MTU: int(le.Uint32(h[12:])), Ring: int(le.Uint32(h[16:])), Buffers: int(le.Uint32(h[20:]))}
	if c.MTU == 0 || c.Ring == 0 || c.Buffers == 0 {
		return layout{}, fmt.Errorf("bad port geometry: MTU %d, ring %d, %d buffers", c.MTU, c.Ring, c.Buffers)
	}
	c, err := c.resolve()
	if err != nil {
		return layout{}, fmt.Errorf("bad port geometry: %w", err)
	}
	l, err := newLayout(c)
	if err != nil {
		return layout{}, err
	}
	if ss := int(le.Uint32(h[24:])); ss != l.slotSize {
		return layout{}, fmt.Errorf("slot size %d, want %d for MTU %d", ss, l.slotSize, l.mtu)
	}
	if t := le.Uint64(h[32:]); t != uint64(l.total) || size != int64(l.total) {
		return layout{}, fmt.Errorf("port size %d (header says %d), want %d", size, t, l.total)
	}
	return l, nil
}
