package pcaptest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/xdproce/xdproce/capture"
)

// Golden compares a test's capture with the golden file at path, or writes
// it there when update is set (the packages' -update flag). pkg names the
// package in the hint that tells how to regenerate it ("./am").
func Golden(tb testing.TB, path string, got []byte, update bool, pkg string) {
	tb.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	stored, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (go test %s -run Golden -update creates it)", err, pkg)
	}
	if !bytes.Equal(got, stored) {
		i := 0
		for i < len(got) && i < len(stored) && got[i] == stored[i] {
			i++
		}
		tb.Fatalf("%s differs from this run's capture at byte %d (got %d B, stored %d B); if intended, go test %s -run Golden -update",
			filepath.Base(path), i, len(got), len(stored), pkg)
	}
}

// Describe describes every frame of a pcapng capture as xdproce dump does
// and fails the test for a frame that does not decode with a good ICRC
// (dump --verify).
func Describe(tb testing.TB, pcap []byte) []*capture.Record {
	tb.Helper()
	r, err := capture.NewReader(bytes.NewReader(pcap))
	if err != nil {
		tb.Fatal(err)
	}
	var recs []*capture.Record
	for i := 1; ; i++ {
		var f capture.Frame
		if err := r.Next(&f); errors.Is(err, io.EOF) {
			return recs
		} else if err != nil {
			tb.Fatal(err)
		}
		f.Index = i
		rec := capture.Describe(&f)
		if rec.Error != "" || rec.BTH == nil || rec.ICRC == nil || !rec.ICRC.OK {
			tb.Errorf("frame %d does not verify: %s", i, rec)
		}
		recs = append(recs, rec)
	}
}
