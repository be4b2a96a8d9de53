package xfer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/enlarge"
	"github.com/xdproce/xdproce/roce"
)

// climbCases are file sizes with the phase the data's direction reaches
// through DefaultEnlargeConfig and the promotions on the way.
var climbCases = []struct {
	size, phase, promotions int
}{
	{0, 0, 0},
	{1, 0, 0},
	{460, 0, 0}, // 90 % of 512 B: still eager
	{461, 1, 1},
	{7372, 1, 1}, // 90 % of 8 KiB
	{7373, 1, 1}, // 7372 B, then 1 B: still fits the 8 KiB step
	{2*7372 + 1, 2, 2},
	{1<<20 + 17, 2, 2},
	{3 << 20, 2, 2},
}

// overLinks runs f on a pair of devices over link/pipe and over link/udp on
// loopback.
func overLinks(t *testing.T, f func(t *testing.T, a, b *roce.Device)) {
	for _, tt := range []struct {
		name string
		devs func(*testing.T) (a, b *roce.Device)
	}{{"pipe", pipeDevices}, {"udp", loopDevices}} {
		t.Run(tt.name, func(t *testing.T) {
			// Over link/pipe every handoff of registered memory is ordered
			// by a completion queue (the channel's), so it runs under
			// -race too.
			if raceEnabled && tt.name != "pipe" {
				t.Skip("see race_on_test.go")
			}
			a, b := tt.devs(t)
			f(t, a, b)
		})
	}
}

// TestSendEnlarge: files go through an enlargement channel byte-exact over
// link/pipe and over link/udp on loopback; the sending direction climbs the
// ladder only as far as the file needs (eager for what fits the 512 B ring,
// one promotion per step after), and both ends report it.
func TestSendEnlarge(t *testing.T) {
	overLinks(t, func(t *testing.T, a, b *roce.Device) {
		r := newRigOn(t, a, b, nil)
		for i, c := range climbCases {
			data := randomBytes(c.size, uint64(i))
			name := "e" + string(rune('a'+i))
			res, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(c.size), name,
				&Options{Enlarge: DefaultEnlargeConfig()})
			if err != nil {
				t.Fatalf("send %d bytes: %v", c.size, err)
			}
			if err := <-r.srvErr; err != nil {
				t.Fatalf("server: %v", err)
			}
			got, err := os.ReadFile(filepath.Join(r.dir, name))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("stored %d bytes (%v), want %d byte-exact", len(got), err, c.size)
			}
			e := res.Enlarge
			if res.SHA256 != sum(data) || res.Op != OpEnlarge || e == nil {
				t.Fatalf("send %d bytes: result %+v", c.size, res)
			}
			if e.Phase != c.phase || e.Promotions != c.promotions || e.ControlSent != c.promotions ||
				e.SlotSize != enlarge.DefaultLadder[c.phase] {
				t.Errorf("send %d bytes: channel %+v, want phase %d after %d promotions", c.size, *e, c.phase, c.promotions)
			}
			assertNoTemp(t, r.dir)
		}
		if qa, qb := a.Stats().QPs, b.Stats().QPs; qa != 0 || qb != 0 {
			t.Errorf("queue pairs alive: %d, %d", qa, qb)
		}
	})
}

// TestEnlargeRefusals: a put_enlarge without a channel, with a configuration
// enlarge refuses, or whose buffers exceed the server's staging limit is
// refused with the reason, and nothing is written.
func TestEnlargeRefusals(t *testing.T) {
	r := newRig(t, nil)
	for _, tt := range []struct {
		ch   *channelInfo
		want string
	}{
		{nil, "no channel in the request"},
		{&channelInfo{Mode: "enlarge", Ladder: []int{512, 8192}, RingSlots: 16, LargeSlots: 1, Threshold: 50}, "threshold 50%"},
		{&channelInfo{Mode: "enlarge", Ladder: []int{512}, RingSlots: 16, LargeSlots: 1, Threshold: 90}, "ladder has 1 steps"},
		{&channelInfo{Mode: "sideways", Ladder: []int{512, 8192}, RingSlots: 16, LargeSlots: 1, Threshold: 90}, `unknown mode "sideways"`},
		{&channelInfo{Mode: "enlarge", Ladder: []int{512, 8192}}, "configuration incomplete"},
		{&channelInfo{Mode: "baseline", Ladder: []int{1 << 20}, RingSlots: 1024, LargeSlots: 1, Threshold: 90}, "over this server's limit"},
	} {
		c := newCtrl(t.Context(), r.dial(t))
		req := &message{Type: msgPutEnlarge, Version: ProtocolVersion, Name: "refused", Size: 10, Channel: tt.ch,
			QPN: 0x11, GID: "::ffff:127.0.0.1", PathMTU: 1024}
		if err := c.send(req); err != nil {
			t.Fatal(err)
		}
		var m message
		err := c.expect(&m, msgAccept)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("channel %+v: %v, want an error with %q", tt.ch, err, tt.want)
		}
		if err := <-r.srvErr; err == nil {
			t.Errorf("channel %+v: server reported success", tt.ch)
		}
		c.close()
	}
	if _, err := os.Stat(filepath.Join(r.dir, "refused")); !os.IsNotExist(err) {
		t.Errorf("refused file exists: %v", err)
	}
	assertNoTemp(t, r.dir)
}

// TestSendBaseline: the channel's baseline mode (a fixed 32 × 4 KiB ring,
// never promoted) carries a file too, with no control message.
func TestSendBaseline(t *testing.T) {
	a, b := pipeDevices(t)
	r := newRigOn(t, a, b, nil)
	data := randomBytes(1<<20+5, 21)
	res, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "base",
		&Options{Enlarge: &enlarge.Config{Mode: enlarge.Baseline}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-r.srvErr; err != nil {
		t.Fatalf("server: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(r.dir, "base")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (%v)", len(got), err)
	}
	if e := res.Enlarge; e == nil || e.Phase != 0 || e.Promotions != 0 || e.ControlSent != 0 || e.SlotSize != enlarge.BaselineSlotSize {
		t.Errorf("channel %+v", e)
	}
}

// TestChannelInfoGrowSlots: the grown ring's size travels with the
// configuration; a peer that does not send it (from before ring growth) gets
// a ring that does not grow, and what this end describes round-trips.
func TestChannelInfoGrowSlots(t *testing.T) {
	base := channelInfo{Mode: "enlarge", Ladder: []int{512, 8192, 131072}, RingSlots: 4, LargeSlots: 4, Threshold: 90}
	for _, tt := range []struct {
		grow, want int
	}{{0, 0}, {16, 16 * 512}, {-1, 0}} {
		ci := base
		ci.GrowSlots = tt.grow
		cfg, err := ci.config()
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.GrownRingBytes(); got != tt.want {
			t.Errorf("grow_slots %d: grown ring %d B, want %d", tt.grow, got, tt.want)
		}
	}
	dev, _ := pipeDevices(t)
	c, err := newChanConn(dev, DefaultEnlargeConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	info := c.info()
	if info.RingSlots != enlarge.DefaultRingSlots || info.GrowSlots != enlarge.DefaultGrowSlots {
		t.Errorf("this end describes ring %d, grow %d", info.RingSlots, info.GrowSlots)
	}
	if got := c.pool.RegisteredBytes(); got != enlarge.DefaultGrowSlots*enlarge.DefaultSmall {
		t.Errorf("eager pool of %d B, want %d slots of %d B (the grown ring's)", got, enlarge.DefaultGrowSlots, enlarge.DefaultSmall)
	}
}
