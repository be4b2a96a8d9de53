package roce

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// GIDTableLen is the size of a port's GID table (rxe's gid_tbl_len): an
// interface with more addresses gets the first GIDTableLen of them.
const GIDTableLen = 1024

// port is the state of a device's one port that follows its interface: the
// GID table and whether the link is up. A device made by NewDevice keeps the
// table it was made with and stays active.
type port struct {
	mu        sync.Mutex
	gids      []netip.Addr // replaced, never modified in place
	up        bool
	speedMbps int // the interface's ethtool speed (0: unknown)
}

// gidTable returns the current GID table (shared: do not modify).
func (d *Device) gidTable() []netip.Addr {
	d.port.mu.Lock()
	defer d.port.mu.Unlock()
	return d.port.gids
}

// GIDs returns a copy of the GID table.
func (d *Device) GIDs() []netip.Addr { return slices.Clone(d.gidTable()) }

// GID returns the GID at index i.
func (d *Device) GID(i int) (netip.Addr, error) {
	gids := d.gidTable()
	if i < 0 || i >= len(gids) {
		return netip.Addr{}, fmt.Errorf("roce: gid index %d out of range (table has %d)", i, len(gids))
	}
	return gids[i], nil
}

// PortActive reports whether the port is active: its interface is up and
// has carrier (always, for a device made by NewDevice).
func (d *Device) PortActive() bool {
	d.port.mu.Lock()
	defer d.port.mu.Unlock()
	return d.port.up
}

// setAddrs rebuilds the GID table from the interface's addresses and raises
// EventGIDChange when it changed. It returns the GIDs added and removed.
func (d *Device) setAddrs(addrs []netip.Addr) (added, removed []netip.Addr) {
	gids := buildGIDTable(d.hw, addrs)
	d.port.mu.Lock()
	old := d.port.gids
	changed := !slices.Equal(old, gids)
	if changed {
		d.port.gids = gids
	}
	d.port.mu.Unlock()
	if !changed {
		return nil, nil
	}
	for _, g := range gids {
		if !slices.Contains(old, g) {
			added = append(added, g)
		}
	}
	for _, g := range old {
		if !slices.Contains(gids, g) {
			removed = append(removed, g)
		}
	}
	d.events.raise(AsyncEvent{Type: EventGIDChange, Port: 1})
	return added, removed
}

// setUp moves the port's state and raises EventPortActive or EventPortError
// when it changed.
func (d *Device) setUp(up bool) {
	d.port.mu.Lock()
	changed := d.port.up != up
	d.port.up = up
	d.port.mu.Unlock()
	if !changed {
		return
	}
	if up {
		d.events.raise(AsyncEvent{Type: EventPortActive, Port: 1})
	} else {
		d.events.raise(AsyncEvent{Type: EventPortError, Port: 1})
	}
}
