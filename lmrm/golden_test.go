package lmrm

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/internal/pcaptest"
	"github.com/xdproce/xdproce/roce/wire"
)

var update = flag.Bool("update", false, "rewrite the golden capture testdata/pcaps/lmrm-alloc.pcapng")

const goldenPath = "../testdata/pcaps/lmrm-alloc.pcapng"

// TestGoldenAlloc: a requester asks once for 8 slots of 256 B and writes 16
// messages through them (the provider releases every 2): the requester's
// direction shows one LMRM_ALLOC, then data writes only; the provider's one
// LMRM_ALLOC_ACK, then LMRM_RELEASEs only (ACKs aside). Every frame
// verifies, the data arrives, and the capture is byte-identical to the
// stored one.
func TestGoldenAlloc(t *testing.T) {
	const slot, slots, msgs = 256, 8, 16
	l := newLab(t, Config{Depth: 16}, ProviderConfig{RecvDepth: 16})
	if err := l.r.Alloc(slot*slots, slot); err != nil {
		t.Fatal(err)
	}
	l.run(func() bool { return l.r.Stats().Pools == 1 })
	var sent [][]byte
	for range 1000 {
		for len(sent) < msgs {
			s, err := l.r.Reserve()
			if errors.Is(err, ErrExhausted) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 16+len(sent)*13)
			for i := range b {
				b[i] = byte(i*31 + len(sent))
			}
			if err := l.r.Write(s, b); err != nil {
				t.Fatal(err)
			}
			sent = append(sent, b)
		}
		if l.step() == 0 && len(sent) == msgs && l.r.Stats().Free == slots {
			break
		}
	}
	if len(l.got) != msgs {
		t.Fatalf("%d messages delivered, want %d", len(l.got), msgs)
	}
	for i := range sent {
		if !bytes.Equal(sent[i], l.got[i]) {
			t.Fatalf("message %d differs", i)
		}
	}
	if err := l.cw.Flush(); err != nil {
		t.Fatal(err)
	}
	got := l.pcap.Bytes()

	var out, in []string
	for _, r := range pcaptest.Describe(t, got) {
		if r.BTH.Opcode == wire.RCAck.String() {
			continue
		}
		s := r.BTH.Opcode
		if r.Payload != "" {
			s = strings.Fields(r.Payload)[0]
		}
		if r.Dir == "out" {
			out = append(out, s)
		} else {
			in = append(in, s)
		}
	}
	wantOut := []string{"LMRM_ALLOC"}
	for range msgs {
		wantOut = append(wantOut, wire.RCWriteOnlyImm.String())
	}
	wantIn := []string{"LMRM_ALLOC_ACK"}
	for range msgs / 2 {
		wantIn = append(wantIn, "LMRM_RELEASE")
	}
	if strings.Join(out, " ") != strings.Join(wantOut, " ") {
		t.Errorf("requester's frames:\n%q\nwant\n%q", out, wantOut)
	}
	if strings.Join(in, " ") != strings.Join(wantIn, " ") {
		t.Errorf("provider's frames:\n%q\nwant\n%q", in, wantIn)
	}

	pcaptest.Golden(t, goldenPath, got, *update, "./lmrm")
}
