package xsk

import (
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/link"
)

// Device is the set of sockets opened on one interface, one per rx queue.
type Device struct {
	Ifname  string
	Sockets []*Socket // in the order of Config.Queues (ascending queue ids by default)
}

// Open opens an AF_XDP socket on each rx queue of the interface (or on
// cfg.Queues). The sockets receive nothing until an XDP program redirects
// frames to them (package bpf: pass FDs to bpf.Attach). cfg may be nil.
func Open(ifname string, cfg *Config) (*Device, error) {
	c := cfg.withDefaults()
	queues := c.Queues
	if queues == nil {
		n, err := QueueCount(ifname)
		if err != nil {
			return nil, err
		}
		for q := range n {
			queues = append(queues, q)
		}
	}
	d := &Device{Ifname: ifname}
	for _, q := range queues {
		s, err := OpenQueue(ifname, q, &c)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.Sockets = append(d.Sockets, s)
	}
	return d, nil
}

// FDs returns the socket file descriptors indexed by queue id, -1 where the
// device has no socket (the form bpf.Attach takes).
func (d *Device) FDs() []int {
	n := 0
	for _, s := range d.Sockets {
		n = max(n, s.queue+1)
	}
	fds := make([]int, n)
	for i := range fds {
		fds[i] = -1
	}
	for _, s := range d.Sockets {
		fds[s.queue] = s.fd
	}
	return fds
}

// SetXDPMode records the mode of the steering program ("native" or
// "generic") for Props().Name on every socket.
func (d *Device) SetXDPMode(mode string) {
	for _, s := range d.Sockets {
		s.SetXDPMode(mode)
	}
}

// Link returns the device's sockets as one link.Link: the socket itself when
// there is one, else a MultiQueue over all of them. The link owns the
// sockets: closing it closes them (Close then skips them).
func (d *Device) Link() (link.Link, error) {
	switch len(d.Sockets) {
	case 0:
		return nil, fmt.Errorf("xsk: %s: no sockets", d.Ifname)
	case 1:
		return d.Sockets[0], nil
	}
	return NewMultiQueue(d.Sockets)
}

// Close closes every socket (sockets already closed are skipped).
func (d *Device) Close() error {
	var errs []error
	for _, s := range d.Sockets {
		if err := s.Close(); err != nil && !errors.Is(err, link.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
