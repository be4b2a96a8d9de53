package xfer

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/enlarge"
	"github.com/xdproce/xdproce/roce"
)

// TestGetEnlarge: get_enlarge brings files back through an enlargement
// channel byte-exact over link/pipe and over link/udp on loopback: the
// server's sending direction climbs the ladder only as far as the file needs,
// the client answers each ENLARGE_REQ with an ENLARGE_ACK and reports the
// phase reached, and no temporary file is left on either side.
func TestGetEnlarge(t *testing.T) {
	overLinks(t, func(t *testing.T, a, b *roce.Device) {
		r := newRigOn(t, a, b, nil)
		out := t.TempDir()
		for i, c := range climbCases {
			data := randomBytes(c.size, uint64(100+i))
			name := "g" + string(rune('a'+i))
			if err := os.WriteFile(filepath.Join(r.dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
			var progress int64
			dst := filepath.Join(out, name)
			res, err := Get(t.Context(), r.client, r.dial(t), name, dst,
				&Options{Enlarge: DefaultEnlargeConfig(), Progress: func(done, total int64) { progress = done }})
			if err != nil {
				t.Fatalf("get %d bytes: %v", c.size, err)
			}
			if err := <-r.srvErr; err != nil {
				t.Fatalf("server: %v", err)
			}
			if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("got %d bytes (%v), want %d byte-exact", len(got), err, c.size)
			}
			e := res.Enlarge
			if res.SHA256 != sum(data) || res.Size != int64(c.size) || res.Op != OpEnlarge || e == nil || progress != int64(c.size) {
				t.Fatalf("get %d bytes: result %+v, progress %d", c.size, res, progress)
			}
			if e.Phase != c.phase || e.Promotions != c.promotions || e.ControlSent != c.promotions ||
				e.SlotSize != enlarge.DefaultLadder[c.phase] {
				t.Errorf("get %d bytes: channel %+v, want phase %d after %d promotions (acks sent)", c.size, *e, c.phase, c.promotions)
			}
			assertNoTemp(t, out)
		}
		assertNoTemp(t, r.dir)
		if qa, qb := a.Stats().QPs, b.Stats().QPs; qa != 0 || qb != 0 {
			t.Errorf("queue pairs alive: %d, %d", qa, qb)
		}
	})
}

// TestGetEnlargeRefused: a get_enlarge of a name the server does not have,
// or with a channel over the server's staging limit, fails with the server's
// reason and leaves no file.
func TestGetEnlargeRefused(t *testing.T) {
	a, b := pipeDevices(t)
	r := newRigOn(t, a, b, nil)
	os.WriteFile(filepath.Join(r.dir, "there"), []byte("x"), 0o644)
	out := t.TempDir()
	for _, tt := range []struct {
		name string
		cfg  *enlarge.Config
		want string
	}{
		{"nothere", DefaultEnlargeConfig(), "nothere"},
		{"there", &enlarge.Config{Mode: enlarge.Baseline, RingSlots: 1024, Ladder: []int{1 << 20}}, "over this server's limit"},
	} {
		_, err := Get(t.Context(), r.client, r.dial(t), tt.name, filepath.Join(out, tt.name), &Options{Enlarge: tt.cfg})
		var re *RemoteError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("get %s: %v, want the server's refusal with %q", tt.name, err, tt.want)
		}
		if err := <-r.srvErr; err == nil {
			t.Errorf("get %s: server reported success", tt.name)
		}
		if _, err := os.Stat(filepath.Join(out, tt.name)); !os.IsNotExist(err) {
			t.Errorf("get %s: file exists: %v", tt.name, err)
		}
	}
	assertNoTemp(t, out)
}
