package roce

import (
	"errors"
	"strconv"
)

// ErrHeld is wrapped by the *HeldError that Open and ProbeAFXDP return when
// another process holds the interface.
var ErrHeld = errors.New("interface held by another process")

// A Holder is a process that holds what an interface needs: its XDP hook
// (the steering program takes every RoCE frame for the interface's
// addresses) or the RoCE UDP port (the kernel hands those frames to its
// socket).
type Holder struct {
	// PID is the holder's process ID, 0 when this process cannot see it.
	PID int
	// Command is its command line, shortened; when PID is 0 it says what
	// is known instead ("uid 1000", "no process: a kernel socket").
	Command string
	// Holds says what it holds: "XDP program xdp_steer (id 97)", "UDP port
	// 4791 on 198.51.100.1".
	Holds string
}

func (h *Holder) String() string {
	s := "a process not visible to this one"
	if h.PID > 0 {
		s = "PID " + strconv.Itoa(h.PID)
	}
	if h.Command != "" {
		s += " (" + h.Command + ")"
	}
	if h.Holds != "" {
		s += ", which holds " + h.Holds
	}
	return s
}

// HeldError says that another process holds the interface, so that frames
// for it would not reach this one. It wraps ErrHeld.
type HeldError struct {
	Holder Holder
}

func (e *HeldError) Error() string { return "interface held by " + e.Holder.String() }

func (e *HeldError) Unwrap() error { return ErrHeld }
