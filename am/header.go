package am

import (
	"encoding/binary"
	"fmt"
)

// The wire format. Every active message is one RC SEND whose payload starts
// with a 32-byte header (big-endian, as the transport headers):
//
//	 0       4        5      6        8               16       20      24             32
//	| "XDAM" | handler | flags | status | tag (u64)     | window | len   | offset (u64)  |
//
// AM_WRITE carries len bytes of data after the header; AM_READ_REPLY too.
// AM_WRITE_RTS and AM_READ with FlagRMA carry a 16-byte RMA descriptor after
// it: the initiator's buffer registered for this tag alone (addr u64, rkey
// u32, 4 zero bytes). AM_DONE and AM_NAK are the header alone; AM_NAK's
// status says why.

// HeaderLen is the length of the active-message header.
const HeaderLen = 32

// rmaDescLen is the length of the RMA descriptor after an AM_WRITE_RTS or
// AM_READ (FlagRMA) header.
const rmaDescLen = 16

// Magic opens every active message.
const Magic = "XDAM"

// Handler names an active-message handler.
type Handler uint8

// The built-in handlers.
const (
	HWrite     Handler = iota + 1 // inline write: copy the payload into the window
	HWriteRTS                     // large write: the target RDMA-READs the initiator's tagged buffer
	HRead                         // read: inline reply, or (FlagRMA) RDMA WRITE into the tagged buffer
	HReadReply                    // the data of an inline read
	HDone                         // the tagged operation completed
	HNAK                          // the request was refused (Status says why)
	HReply                        // the reply of a registered handler (Call)

	// HUser is the first id Register accepts; ids below are reserved for
	// the built-in handlers.
	HUser Handler = 16
)

var handlerNames = [...]string{HWrite: "AM_WRITE", HWriteRTS: "AM_WRITE_RTS", HRead: "AM_READ",
	HReadReply: "AM_READ_REPLY", HDone: "AM_DONE", HNAK: "AM_NAK", HReply: "AM_REPLY"}

func (h Handler) String() string {
	if int(h) < len(handlerNames) && handlerNames[h] != "" {
		return handlerNames[h]
	}
	return fmt.Sprintf("AM_%d", uint8(h))
}

// FlagRMA marks an AM_READ whose data goes back by RDMA WRITE into the
// tagged buffer its descriptor names.
const FlagRMA = 1

// Status is an AM_NAK's reason.
type Status uint16

// NAK reasons.
const (
	StatusOK             Status = iota
	StatusUnknownWindow         // no window with that id is exposed
	StatusOutOfRange            // offset and length are not inside the window
	StatusBadRequest            // malformed request or unknown handler
	StatusUnknownHandler        // no handler is registered with that id
)

var statusNames = [...]string{StatusOK: "ok", StatusUnknownWindow: "unknown window",
	StatusOutOfRange: "out of range", StatusBadRequest: "bad request", StatusUnknownHandler: "unknown handler"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status %d", uint16(s))
}

// Header is a decoded active-message header.
type Header struct {
	Handler Handler
	Flags   uint8
	Status  Status
	Tag     uint64
	Window  uint32
	Len     uint32
	Off     uint64
}

// RMADesc names the initiator's buffer registered for one tag.
type RMADesc struct {
	Addr uint64
	RKey uint32
}

// Put writes h into b[:HeaderLen].
func (h *Header) Put(b []byte) {
	_ = b[HeaderLen-1]
	copy(b, Magic)
	b[4], b[5] = byte(h.Handler), h.Flags
	binary.BigEndian.PutUint16(b[6:], uint16(h.Status))
	binary.BigEndian.PutUint64(b[8:], h.Tag)
	binary.BigEndian.PutUint32(b[16:], h.Window)
	binary.BigEndian.PutUint32(b[20:], h.Len)
	binary.BigEndian.PutUint64(b[24:], h.Off)
}

// ParseHeader decodes the header at the start of b; ok is false when b is
// shorter than HeaderLen or does not start with Magic.
func ParseHeader(b []byte) (h Header, ok bool) {
	if len(b) < HeaderLen || string(b[:4]) != Magic {
		return h, false
	}
	h.Handler, h.Flags = Handler(b[4]), b[5]
	h.Status = Status(binary.BigEndian.Uint16(b[6:]))
	h.Tag = binary.BigEndian.Uint64(b[8:])
	h.Window = binary.BigEndian.Uint32(b[16:])
	h.Len = binary.BigEndian.Uint32(b[20:])
	h.Off = binary.BigEndian.Uint64(b[24:])
	return h, true
}

// Put writes d into b[:16].
func (d RMADesc) Put(b []byte) {
	binary.BigEndian.PutUint64(b, d.Addr)
	binary.BigEndian.PutUint32(b[8:], d.RKey)
	clear(b[12:16])
}

// ParseRMADesc decodes the descriptor after a header (b is the whole
// message).
func ParseRMADesc(b []byte) (RMADesc, bool) {
	if len(b) < HeaderLen+rmaDescLen {
		return RMADesc{}, false
	}
	d := b[HeaderLen:]
	return RMADesc{Addr: binary.BigEndian.Uint64(d), RKey: binary.BigEndian.Uint32(d[8:])}, true
}

// hasRMADesc reports whether a message with header h carries an RMA
// descriptor.
func (h *Header) hasRMADesc() bool {
	return h.Handler == HWriteRTS || h.Handler == HRead && h.Flags&FlagRMA != 0
}

// Describe names an active message for captures: "AM_WRITE_RTS tag=1 win=7
// off=0x0 len=100000 addr=0x… rkey=0x…". b is the message (or its first
// packet's payload).
func Describe(b []byte) (string, bool) {
	h, ok := ParseHeader(b)
	if !ok {
		return "", false
	}
	s := fmt.Sprintf("%v tag=%d win=%d off=%#x len=%d", h.Handler, h.Tag, h.Window, h.Off, h.Len)
	if h.Handler == HNAK {
		s += " status=" + h.Status.String()
	}
	if h.hasRMADesc() {
		if d, ok := ParseRMADesc(b); ok {
			s += fmt.Sprintf(" addr=%#x rkey=%#x", d.Addr, d.RKey)
		} else {
			s += " (no rma descriptor)"
		}
	}
	return s, true
}
