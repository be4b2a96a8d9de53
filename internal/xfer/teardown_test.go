package xfer

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// pipeDevices makes two devices over link/pipe, whose Wait blocks until a
// frame or a wake-up: an idle device's engine sleeps for good, as over
// AF_XDP.
func pipeDevices(t *testing.T) (a, b *roce.Device) {
	t.Helper()
	return pipeDevicesWith(t, pipe.Config{})
}

// pipeDevicesWith is pipeDevices over a pipe with cfg (its MTU 4200: OOO
// segments of 4096 bytes).
func pipeDevicesWith(t *testing.T, cfg pipe.Config) (a, b *roce.Device) {
	t.Helper()
	cfg.MTU = 4200
	la, lb, err := pipe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return devicesOn(t, la, lb)
}

// devicesOn makes a device on each link (198.51.100.1 and .2), closed at
// the test's end.
func devicesOn(t *testing.T, la, lb link.Link) (a, b *roce.Device) {
	t.Helper()
	var err error
	if a, err = roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}}); err != nil {
		t.Fatal(err)
	}
	if b, err = roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.2")}}); err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestTeardownOnIdleDevices: after a transfer between two devices whose
// engines then sleep until woken, both ends' queue pairs are destroyed within
// a bounded time (TestPrivilegedTeardownXSK does the same over AF_XDP).
func TestTeardownOnIdleDevices(t *testing.T) {
	if raceEnabled {
		t.Skip("see race_on_test.go")
	}
	a, b := pipeDevices(t)
	r := newRigOn(t, a, b, &Options{SlotSize: 64 << 10, Slots: 2})
	data := randomBytes(200<<10, 3)
	start := time.Now()
	if _, err := Send(t.Context(), r.client, r.dial(t), bytes.NewReader(data), int64(len(data)), "idle", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-r.srvErr; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("transfer and teardown took %v", d)
	}
	if qa, qb := r.client.Stats().QPs, r.server.Stats().QPs; qa != 0 || qb != 0 {
		t.Errorf("queue pairs alive after the transfer: client %d, server %d", qa, qb)
	}
}
