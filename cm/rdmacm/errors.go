package rdmacm

import "errors"

// Sentinel errors. Every error this package returns matches exactly one of
// them under errors.Is; most are *Error values that add where the problem
// was.
var (
	// ErrLength: a MAD is not exactly MADLen bytes, or an encode buffer is
	// shorter than that.
	ErrLength = errors.New("bad length")
	// ErrNotCM: the MAD's management class is not CM (0x07). On QP1 this is
	// a MAD for another class, not a broken CM message.
	ErrNotCM = errors.New("not a CM MAD")
	// ErrVersion: the base version is not 1 or the class version is not 2
	// (the CM answers the latter with REJ reason RejInvalidClassVersion).
	ErrVersion = errors.New("unsupported version")
	// ErrMethod: the method is not SEND (0x03), the only one the CM uses.
	ErrMethod = errors.New("unsupported method")
	// ErrUnknownAttr: the attribute ID names no CM message, or a message of
	// another type than the one asked for.
	ErrUnknownAttr = errors.New("unknown attribute")
	// ErrBadField: a field is out of its range: a length field longer than
	// the area it describes on decode, a value wider than its bits on encode.
	ErrBadField = errors.New("field out of range")
	// ErrPrivateData: the private data does not start with a valid IP CM
	// header (version 0, IP version 4 or 6), or user data does not fit.
	ErrPrivateData = errors.New("bad IP CM private data")
)

// Error is a decode or encode error with its place. Decode errors are
// package-level values, so a malformed MAD costs no allocation.
type Error struct {
	Op  string // "decode mad", "encode req", ...
	Msg string // detail, lower case
	Err error  // the sentinel
}

func (e *Error) Error() string { return "rdmacm: " + e.Op + ": " + e.Msg }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e.
func (e *Error) Is(target error) bool { return target == e.Err }

func newErr(op, msg string, sentinel error) *Error { return &Error{Op: op, Msg: msg, Err: sentinel} }

var (
	errMADLength    = newErr("decode mad", "MAD is not 256 bytes", ErrLength)
	errBaseVersion  = newErr("decode mad", "base version is not 1", ErrVersion)
	errClass        = newErr("decode mad", "management class is not CM (0x07)", ErrNotCM)
	errClassVersion = newErr("decode mad", "CM class version is not 2", ErrVersion)
	errMethod       = newErr("decode mad", "method is not SEND (0x03)", ErrMethod)
	errAttr         = newErr("decode mad", "attribute ID is not a CM message", ErrUnknownAttr)
	errAttrMismatch = newErr("decode mad", "attribute ID differs from the message asked for", ErrUnknownAttr)
	errREJInfoLen   = newErr("decode rej", "rejected info length above 72", ErrBadField)
	errAPRInfoLen   = newErr("decode apr", "additional info length above 72", ErrBadField)
	errSIDRInfoLen  = newErr("decode sidr_rep", "additional info length above 72", ErrBadField)

	errEncShort    = newErr("encode mad", "buffer shorter than 256 bytes", ErrLength)
	errEncHeader   = newErr("encode mad", "header is not base version 1, class CM (0x07), class version 2, method SEND", ErrBadField)
	errEncAttr     = newErr("encode mad", "header attribute ID differs from the message's", ErrUnknownAttr)
	errEncNil      = newErr("encode mad", "no message", ErrUnknownAttr)
	errPDShort     = newErr("decode ip header", "private data shorter than 36 bytes", ErrPrivateData)
	errPDVersion   = newErr("decode ip header", "CM version is not 0", ErrPrivateData)
	errPDIPVersion = newErr("decode ip header", "IP version is neither 4 nor 6", ErrPrivateData)
	errPDEncShort  = newErr("encode ip header", "private data shorter than 36 bytes", ErrPrivateData)
	errPDEncFamily = newErr("encode ip header", "source and destination are not both IPv4 or both IPv6", ErrPrivateData)
	errPDUserLong  = newErr("encode ip header", "user data longer than the private data leaves room for", ErrPrivateData)
)

// rangeCheck remembers the first field found out of range while encoding.
type rangeCheck struct{ field string }

func (c *rangeCheck) max(name string, v, limit uint64) {
	if c.field == "" && v > limit {
		c.field = name
	}
}

// err returns nil or the error naming the first field out of range. It
// allocates, but only for a message that cannot be sent anyway.
func (c *rangeCheck) err(op string) error {
	if c.field == "" {
		return nil
	}
	return &Error{Op: op, Msg: c.field + " out of range", Err: ErrBadField}
}
