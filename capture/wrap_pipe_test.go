package capture

import (
	"bytes"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/linktest"
	"github.com/xdproce/xdproce/link/pipe"
)

// TestWrapConformance runs the link conformance suite on a pipe pair whose
// ends are both wrapped (sharing one Writer): recording must not change
// behaviour, and must not allocate.
func TestWrapConformance(t *testing.T) {
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		a, b, err := pipe.New(pipe.Config{Depth: 64, TxBuffers: 48})
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewWriter(io.Discard, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := w.Err(); err != nil {
				t.Errorf("capture writer: %v", err)
			}
		})
		return linktest.Pair{
			A: WrapInterface(a, w, Interface{Name: "a"}), B: WrapInterface(b, w, Interface{Name: "b"}),
			AddrA: netip.MustParseAddr("198.51.100.1"), AddrB: netip.MustParseAddr("198.51.100.2"),
		}
	})
}

// TestWrapPipeCapture sends golden frames from a to b over a wrapped pipe:
// the capture holds each frame twice, outbound on a's interface and inbound
// on b's, byte for byte.
func TestWrapPipeCapture(t *testing.T) {
	pa, pb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, nil)
	a := WrapInterface(pa, w, Interface{Name: "a"})
	b := WrapInterface(pb, w, Interface{Name: "b"})
	frames := goldenFrameBytes(t, "rc_write")
	bufs := make([][]byte, 1)
	rx := make([][]byte, 8)
	for _, f := range frames {
		if a.Alloc(bufs) != 1 {
			t.Fatal("no tx buffer")
		}
		n := copy(bufs[0], f)
		if err := a.Send([][]byte{bufs[0][:n]}); err != nil {
			t.Fatal(err)
		}
		got := 0
		for deadline := time.Now().Add(5 * time.Second); got == 0 && time.Now().Before(deadline); {
			b.Wait(100 * time.Millisecond)
			got, err = b.Receive(rx)
			if err != nil {
				t.Fatal(err)
			}
		}
		if got != 1 || !bytes.Equal(rx[0], f) {
			t.Fatalf("received %d frames", got)
		}
	}
	for _, l := range []link.Link{a, b} {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var fr Frame
	for i, f := range frames {
		for _, want := range []struct {
			iface int
			dir   Direction
		}{{0, DirOutbound}, {1, DirInbound}} {
			if err := r.Next(&fr); err != nil {
				t.Fatal(err)
			}
			if fr.Interface != want.iface || fr.Dir != want.dir || !bytes.Equal(fr.Data, f) {
				t.Errorf("frame %d: iface %d %v, want %d %v (bytes equal %v)", i, fr.Interface, fr.Dir, want.iface, want.dir, bytes.Equal(fr.Data, f))
			}
			if rec := Describe(&fr); rec.Bad() {
				t.Errorf("frame %d: %s", i, rec)
			}
		}
	}
	if err := r.Next(&fr); err != io.EOF {
		t.Errorf("extra frames: %v", err)
	}
}
