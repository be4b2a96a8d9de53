//go:build linux

package udp_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestGROScatter: coalesced messages are scattered over frame slots of the
// segment size the last coalesced message had, so that in a stream of equal
// frames none is copied (Stats.RxGROCopied) once the first message set the
// size; a run of another size is gathered (copied) until the next layout
// takes its size. Every frame arrives byte-exact, in order, and reported
// ICRC-checked (link.ICRCChecker), so the engine does not hash it again.
func TestGROScatter(t *testing.T) {
	a, b := pairSamePort(t, udp.Config{MTU: 9000})
	sport := a.Props().SrcPort
	frames := make([][]byte, 64)
	run := func(name string, size int) (copied uint64) {
		t.Helper()
		sent := gsoRun(t, lo1, lo2, sport, 15, size, 0, func(int) uint8 { return 0 })
		before := b.Stats().RxGROCopied
		sendAll(t, a, sent)
		got := 0
		for deadline := time.Now().Add(5 * time.Second); got < len(sent) && time.Now().Before(deadline); {
			k, err := b.Receive(frames)
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range frames[:k] {
				var p, q wire.Packet
				if err := p.Decode(f); err != nil {
					t.Fatalf("%s: frame %d: %v", name, got, err)
				}
				q.Decode(sent[got])
				if !bytes.Equal(p.Payload, q.Payload) || p.BTH != q.BTH {
					t.Fatalf("%s: frame %d arrived as a %d-byte payload, want frame %d's %d bytes", name, got, len(p.Payload), got, len(q.Payload))
				}
				if !b.ICRCChecked(i) {
					t.Errorf("%s: frame %d not reported ICRC-checked", name, got)
				}
				got++
			}
			if k == 0 {
				b.Wait(20 * time.Millisecond)
			}
		}
		if got != len(sent) {
			t.Fatalf("%s: received %d of %d frames (%+v)", name, got, len(sent), b.Stats())
		}
		return b.Stats().RxGROCopied - before
	}
	// The first message is laid out for MTU-sized datagrams: its first
	// segment lands in a slot, the rest are gathered.
	if c := run("first 4 KiB run", 4096); c == 0 || c > 14 {
		t.Errorf("first 4 KiB run: %d frames copied, want 1 to 14", c)
	}
	if c := run("second 4 KiB run", 4096); c != 0 {
		t.Errorf("second 4 KiB run: %d frames copied, want none", c)
	}
	if c := run("first 1000-byte run", 1000); c == 0 {
		t.Error("first 1000-byte run: nothing copied, laid out for 4 KiB segments")
	}
	if c := run("second 1000-byte run", 1000); c != 0 {
		t.Errorf("second 1000-byte run: %d frames copied, want none", c)
	}
	if s := b.Stats(); s.RxGROCoalesced != 4 {
		t.Errorf("receiver %+v: want 4 coalesced messages", s)
	}
}
