package roce_test

import (
	"errors"
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestAllocMRPlain: a device that is no daemon client allocates ordinary
// memory: usable, registered with the access asked for, counted nowhere as
// shared, freed by Deregister (whose second call fails); sizes out of range
// are refused.
func TestAllocMRPlain(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{MTU: 4200})
	pd := p.a.AllocPD()
	for _, n := range []int{0, -1, roce.MaxAllocMR + 1} {
		if _, err := pd.AllocMR(n, roce.LocalWrite); err == nil {
			t.Errorf("AllocMR(%d) succeeded", n)
		}
	}
	if _, err := pd.AllocMR(4096, roce.RemoteWrite); err == nil {
		t.Error("REMOTE_WRITE without LOCAL_WRITE was registered")
	}
	m, err := pd.AllocMR(10000, roce.LocalWrite|roce.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Bytes()) != 10000 || m.Len() != 10000 || m.Access() != roce.LocalWrite|roce.RemoteRead {
		t.Errorf("region of %d bytes, access %v", m.Len(), m.Access())
	}
	m.Bytes()[9999] = 1
	if st := p.a.PlaceStats(); st != (roce.PlaceStats{}) {
		t.Errorf("placement stats %+v on a device without a daemon", st)
	}
	if err := m.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := m.Deregister(); !errors.Is(err, roce.ErrDeallocated) {
		t.Errorf("second Deregister: %v", err)
	}
}
