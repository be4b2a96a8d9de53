package lmrm

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/capture"
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
	for _, r := range describeAll(t, got) {
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

	if *update {
		if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	stored, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (go test ./lmrm -run Golden -update creates it)", err)
	}
	if !bytes.Equal(got, stored) {
		i := 0
		for i < len(got) && i < len(stored) && got[i] == stored[i] {
			i++
		}
		t.Fatalf("%s differs from this run's capture at byte %d (got %d B, stored %d B); if intended, go test ./lmrm -run Golden -update",
			filepath.Base(goldenPath), i, len(got), len(stored))
	}
}

// describeAll describes every frame as xdproce dump does and checks that
// each decodes with a good ICRC (dump --verify's test).
func describeAll(t *testing.T, pcap []byte) []*capture.Record {
	t.Helper()
	r, err := capture.NewReader(bytes.NewReader(pcap))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*capture.Record
	for i := 1; ; i++ {
		var f capture.Frame
		if err := r.Next(&f); errors.Is(err, io.EOF) {
			return recs
		} else if err != nil {
			t.Fatal(err)
		}
		f.Index = i
		rec := capture.Describe(&f)
		if rec.Error != "" || rec.BTH == nil || rec.ICRC == nil || !rec.ICRC.OK {
			t.Errorf("frame %d does not verify: %s", i, rec)
		}
		recs = append(recs, rec)
	}
}
