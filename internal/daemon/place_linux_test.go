package daemon

import (
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestPrivilegedPlacement: two clients of a daemon holding a veth by
// AF_XDP move 16 MiB by RDMA WRITE, READ and SEND between regions from
// PD.AllocMR byte-exact by direct placement: every work request is one
// placement request, no responder fell back, the daemon switched no RoCE
// frame and sent none to the wire, the veth's counters stayed still, and
// the work completions (ID, opcode, status, length) equal those of the
// same script over link/pipe (where AllocMR gives ordinary memory).
func TestPrivilegedPlacement(t *testing.T) {
	netlab.Privileged(t)
	const size, chunk = 16 << 20, 64 << 10
	la, lb, err := pipe.New(pipe.Config{MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	addrs := []netip.Addr{netip.MustParseAddr("198.51.100.1")}
	pa, err := roce.NewDevice(la, &roce.Options{Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	pb, err := roce.NewDevice(lb, &roce.Options{Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	want := scriptMR(t, pa, pb, size, chunk, true)
	if st := pa.PlaceStats(); st.Regions != 0 || st.Requests != 0 {
		t.Errorf("a device over link/pipe shares memory: %+v", st)
	}

	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	sock := filepath.Join(t.TempDir(), "d.sock")
	var d *Daemon
	var x, y *roce.Device
	if err := topo.A.NS.Do(func() error {
		var err error
		if d, err = Start(Config{Interface: topo.A.Name, Socket: sock, Link: roce.LinkXSK}); err != nil {
			return err
		}
		o := &roce.Options{Link: roce.LinkDaemon, Daemon: sock}
		if x, err = roce.Open(topo.A.Name, o); err != nil {
			return err
		}
		y, err = roce.Open(topo.A.Name, o)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer x.Close()
	defer y.Close()
	before := vethBytes(t, topo.A.NS, topo.A.Name)
	got := scriptMR(t, x, y, size, chunk, true)
	if moved := vethBytes(t, topo.A.NS, topo.A.Name) - before; moved > 4096 {
		t.Errorf("the veth moved %d bytes", moved)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%d completions by placement, %d over link/pipe; they differ", len(got), len(want))
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("first difference at %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	}
	wrs := uint64(3 * size / chunk)
	sx, sy := x.PlaceStats(), y.PlaceStats()
	t.Logf("a: %+v", sx)
	t.Logf("a engine: %+v", x.Stats())
	t.Logf("b: %+v", sy)
	// Resends (a local ACK timeout under load) are answered without a
	// copy, but a repeated READ is placed again: at least one copy each.
	if sx.Requests < wrs || sx.Fallbacks != 0 || sy.Answers != sx.Requests || sx.Regions != 1 || sx.SharedBytes != 2*size {
		t.Errorf("placement: requester %+v, responder %+v; want at least %d requests, all answered", sx, sy, wrs)
	}
	st := d.Stats()
	t.Logf("daemon: placed %d (%d bytes), answered %d, fallbacks %d, bad %d, failed %d; switched %d, wire tx %d",
		st.Placed, st.PlacedBytes, st.PlaceAnswered, st.PlaceFallbacks, st.PlaceBad, st.PlaceFailed, st.Switched, st.WireTx)
	if st.Switched != 0 || st.WireTx != 0 || st.Placed < wrs || st.Placed+st.PlaceAnswered != sy.Answers ||
		st.PlacedBytes < 3*size || st.PlaceFallbacks+st.PlaceBad+st.PlaceFailed != 0 {
		t.Errorf("daemon stats %+v: want %d placed, nothing switched", st, wrs)
	}
	for _, c := range st.Clients {
		if c.FromClient != c.ToClient && c.Regions != 1 {
			t.Errorf("client %+v", c)
		}
	}
}
