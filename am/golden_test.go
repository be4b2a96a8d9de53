package am

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/internal/pcaptest"
	"github.com/xdproce/xdproce/roce/wire"
)

var update = flag.Bool("update", false, "rewrite the golden capture testdata/pcaps/am-large-write.pcapng")

const goldenPath = "../testdata/pcaps/am-large-write.pcapng"

// TestGoldenLargeWrite: a 3000-byte AM write (inline limit 256) travels as
// SEND(AM_WRITE_RTS) → RDMA READ request → three READ responses →
// SEND(AM_DONE), ACKs aside; the window's keys appear in no frame; the
// capture is byte-identical to the stored one, and dump names the messages.
func TestGoldenLargeWrite(t *testing.T) {
	l := newLab(t)
	win := make([]byte, 8192)
	if err := l.b.ep.Expose(7, win); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3000)
	for i := range data {
		data[i] = byte(i*7 + 3)
	}
	h, err := l.a.ep.Write(7, 1000, data)
	if err != nil {
		t.Fatal(err)
	}
	l.run(h.Done)
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(win[1000:4000], data) || !allZero(win[:1000]) || !allZero(win[4000:]) {
		t.Fatal("the window does not hold the data at 1000 and zeros elsewhere")
	}
	if st := l.a.ep.Stats(); st.TagRegistered != 1 || st.RequestsSent != 1 {
		t.Errorf("initiator stats %+v", st)
	}
	if st := l.b.ep.Stats(); st.RMAReads != 1 || st.Handled != 1 {
		t.Errorf("target stats %+v", st)
	}
	if err := l.cw.Flush(); err != nil {
		t.Fatal(err)
	}
	got := l.pcap.Bytes()

	// The conversation, ACKs aside.
	recs := pcaptest.Describe(t, got)
	var seq []string
	for _, r := range recs {
		if r.BTH.Opcode == wire.RCAck.String() {
			continue
		}
		s := r.Dir + " " + r.BTH.Opcode
		if r.Payload != "" {
			s += " [" + r.Payload + "]"
		}
		seq = append(seq, s)
	}
	want := []string{
		"out RC_SEND_ONLY [AM_WRITE_RTS tag=1 win=7 off=0x3e8 len=3000 addr=0x",
		"in RC_RDMA_READ_REQUEST",
		"out RC_RDMA_READ_RESPONSE_FIRST",
		"out RC_RDMA_READ_RESPONSE_MIDDLE",
		"out RC_RDMA_READ_RESPONSE_LAST",
		"in RC_SEND_ONLY [AM_DONE tag=1 win=7 off=0x3e8 len=3000]",
	}
	if len(seq) != len(want) {
		t.Fatalf("frames (ACKs aside):\n%q\nwant:\n%q", seq, want)
	}
	for i := range want {
		if len(seq[i]) < len(want[i]) || seq[i][:len(want[i])] != want[i] {
			t.Errorf("frame %d: %q, want %q…", i, seq[i], want[i])
		}
	}

	// No frame carries the window's keys (in either byte order).
	lkey, rkey, ok := l.b.ep.windowKeys(7)
	if !ok {
		t.Fatal("window 7 gone")
	}
	for i, f := range framesOf(t, got) {
		for _, k := range []uint32{lkey, rkey} {
			var be, le [4]byte
			binary.BigEndian.PutUint32(be[:], k)
			binary.LittleEndian.PutUint32(le[:], k)
			if bytes.Contains(f, be[:]) || bytes.Contains(f, le[:]) {
				t.Errorf("frame %d contains the window key %#x", i+1, k)
			}
		}
	}

	pcaptest.Golden(t, goldenPath, got, *update, "./am")
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// framesOf returns the frames of a pcapng capture.
func framesOf(t *testing.T, pcap []byte) [][]byte {
	t.Helper()
	r, err := capture.NewReader(bytes.NewReader(pcap))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		var f capture.Frame
		if err := r.Next(&f); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]byte(nil), f.Data...))
	}
}
