package interop

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/wire"
)

// standardOnly reads an xdproce capture of a session with rxe and reports
// an error if any RoCE frame carries an opcode of the manufacturer-specific
// range (0xC0–0xFF: selective repeat's SR_SACK, the OOO opcodes), a CNP or
// ECN bits (ECT or CE: DCQCN's frames): xdproce's own wire modes are negotiated
// between xdproce peers and never sent to a standard one (issue 20's
// must-show 4). It returns the number of RoCE frames it checked.
func standardOnly(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r, err := capture.NewReader(f)
	if err != nil {
		return 0, err
	}
	var (
		fr capture.Frame
		p  wire.Packet
		n  int
	)
	for i := 1; ; i++ {
		if err := r.Next(&fr); errors.Is(err, io.EOF) {
			return n, nil
		} else if err != nil {
			return n, err
		}
		if p.DecodeWith(fr.Data, wire.AcceptOOO|wire.AcceptSR) != nil {
			continue // not RoCE (ARP, the control connection); dump --verify judges RoCE frames
		}
		n++
		if p.BTH.Opcode >= 0xC0 {
			return n, fmt.Errorf("frame %d: opcode %#x (%v) of the manufacturer-specific range", i, uint8(p.BTH.Opcode), p.BTH.Opcode)
		}
		if p.BTH.Opcode == wire.CNP {
			return n, fmt.Errorf("frame %d: a CNP (DCQCN is for xdproce peers that agreed on it)", i)
		}
		if p.TOS&3 != 0 {
			return n, fmt.Errorf("frame %d: ECN bits %#b in TOS %#x", i, p.TOS&3, p.TOS)
		}
	}
}

// TestStandardOnly: the check every interop row runs on xdproce's capture
// passes the standard golden captures and catches the negotiated modes' (an
// SR_SACK, OOO opcodes, a CNP).
func TestStandardOnly(t *testing.T) {
	dir := filepath.Join("..", "testdata", "pcaps")
	for _, c := range []struct {
		file string
		ok   bool
	}{
		{"rc_write.pcapng", true}, {"rc_read.pcapng", true}, {"rc_atomic.pcapng", true},
		{"rc_ack_nak.pcapng", true}, {"rc_send.pcapng", true},
		{"sr-write-hole.pcapng", false}, {"ooo-frames.pcapng", false}, {"cnp.pcapng", false},
	} {
		n, err := standardOnly(filepath.Join(dir, c.file))
		if n == 0 || (err == nil) != c.ok {
			t.Errorf("%s: %d RoCE frames, %v; want standard %v", c.file, n, err, c.ok)
		}
	}
}
