package cli

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/internal/xfer"
)

// TestDemoPromotionsRetransmission: a control message that RC resent (the
// same record twice in one direction, as a late ACK makes the receiver's
// requester resend its ENLARGE_ACK write) is shown as retransmitted and
// counted once, so demo --enlarge agrees with the sender's one promotion;
// the golden 512 B → 8 KiB promotion with its ACK frame written twice.
func TestDemoPromotionsRetransmission(t *testing.T) {
	in, err := os.Open("../../testdata/pcaps/enlarge-promote-8k.pcapng")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	r, err := capture.NewReader(bufio.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "resent.pcapng")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := capture.NewWriter(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(capture.Interface{Name: "sender"}); err != nil {
		t.Fatal(err)
	}
	var f capture.Frame
	acks := 0
	for {
		if err := r.Next(&f); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n := 1
		if rec := capture.Describe(&f); strings.HasPrefix(rec.Payload, "ENLARGE_ACK") {
			acks++
			n = 2 // and again, as RC resends it
		}
		for range n {
			if err := w.WritePacketNanos(0, f.Time.UnixNano(), f.Dir, f.Data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if acks != 1 {
		t.Fatalf("the golden holds %d ENLARGE_ACKs, want 1", acks)
	}
	var stdout bytes.Buffer
	d := &demo{env: &Env{Stdout: &stdout}, capPath: path}
	if err := d.promotions(&xfer.EnlargeResult{Phase: 1, SlotSize: 8192, Promotions: 1}); err != nil {
		t.Fatalf("promotions: %v\n%s", err, stdout.String())
	}
	got := stdout.String()
	if strings.Count(got, "promotion: frame") != 2 || strings.Count(got, "retransmitted: frame") != 1 ||
		!strings.Contains(got, "enlarge: phase 1 (8192 B slots) after 1 promotions") {
		t.Errorf("output:\n%s", got)
	}
}
