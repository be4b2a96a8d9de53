package xfer

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/xdproce/xdproce/roce"
)

// TestReliabilityAgreement: selective repeat is used only when the client
// asks for it and the server wants it too; otherwise go-back-N. Both sides
// report the same choice, and the file lands byte-exact either way (send
// and get); with selective repeat the server's hold (sr_window) caps the
// client's window.
func TestReliabilityAgreement(t *testing.T) {
	opts := func(r roce.Reliability) *Options {
		co := roce.DefaultConnectOptions()
		co.Reliability = r
		return &Options{SlotSize: 64 << 10, Slots: 2, Connect: &co}
	}
	for _, c := range []struct {
		name           string
		client, server *Options
		want           string
	}{
		{"both sr", opts(roce.SelectiveRepeat), opts(roce.SelectiveRepeat), "sr"},
		{"client gbn", opts(roce.GoBackN), opts(roce.SelectiveRepeat), "gbn"},
		{"server gbn", opts(roce.SelectiveRepeat), opts(roce.GoBackN), "gbn"},
		{"defaults", nil, nil, "gbn"}, // the library's default is go-back-N; the CLI's is sr
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, c.server)
			data := randomBytes(300<<10, 3)
			res, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "f", c.client)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-r.srvErr; err != nil {
				t.Fatalf("server: %v", err)
			}
			if res.Reliability != c.want {
				t.Fatalf("send used %q, want %q", res.Reliability, c.want)
			}
			// The server said how much it holds past a hole; the send
			// window is capped there (go-back-N: no cap).
			if wantWin := map[string]int{"sr": roce.SRHold}[c.want]; res.SRWindow != wantWin {
				t.Fatalf("send's SR window %d, want %d", res.SRWindow, wantWin)
			}
			if got, err := os.ReadFile(filepath.Join(r.dir, "f")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("stored %d bytes (%v)", len(got), err)
			}
			dst := filepath.Join(t.TempDir(), "g")
			res, err = Get(t.Context(), r.client, r.dial(t), "f", dst, c.client)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-r.srvErr; err != nil {
				t.Fatalf("server: %v", err)
			}
			if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) || res.Reliability != c.want {
				t.Fatalf("get: %d bytes (%v), reliability %q, want %q", len(got), err, res.Reliability, c.want)
			}
		})
	}
}
