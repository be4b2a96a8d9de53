package netlab

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/testenv"
)

// StarConfig configures a star lab.
type StarConfig struct {
	// Members is the number of member namespaces, 2..32.
	Members int
	// Link sets every leg's MTU (68..9000, 0 means 1500) and NoOffload
	// (Bare and Queues are not used: members are always addressed, legs
	// have one queue).
	Link LinkConfig
	// Relays puts a relay on the legs of the members it names (by index),
	// each with its config: impairments (changeable later with
	// Relay.Impair) and a bottleneck whose a→b direction is toward the
	// member. A relayed leg turns offloads off on every leg, so relays see
	// whole frames whichever member sent them.
	Relays map[int]RelayConfig
}

// A Star is a lab of member namespaces joined by a Linux bridge in a hub
// namespace: every member has one veth leg to the hub, addressed in
// 198.51.100.0/24 (member i has .i+1) and 2001:db8::/64, with permanent
// neighbour entries for every other member and a route for 224.0.0.0/4 on
// the leg. The bridge does no IGMP/MLD snooping, so multicast floods to every
// member (as to a switch without snooping) and a member that joined a group
// receives it.
//
// A relayed leg is member — veth — hub, where the relay forwards between
// that veth's hub end and one end of a second veth pair whose other end is
// the bridge port.
type Star struct {
	Lab *Lab
	// Hub holds the bridge (named Bridge) and the relays.
	Hub    *NS
	Bridge string
	// Members are the members' leg interfaces (Members[i].NS their namespaces).
	Members []*Iface
	// Ports[i] is the bridge port of member i's leg, in Hub: the hub end of
	// its veth (or, on a relayed leg, of the inner pair). It sees every frame
	// to and from the member, including what an AF_XDP socket on the
	// member's end sends and receives, which a capture on that end misses.
	Ports []*Iface
	// Relays[i] is the relay on member i's leg, nil for a direct leg.
	Relays []*Relay
}

// NewStar builds a star lab as cfg says: up, addressed, with neighbours set.
func NewStar(cfg StarConfig) (*Star, error) {
	if cfg.Members < 2 || cfg.Members > 32 {
		return nil, fmt.Errorf("netlab: star: %d members, want 2..32", cfg.Members)
	}
	for i := range cfg.Relays {
		if i < 0 || i >= cfg.Members {
			return nil, fmt.Errorf("netlab: star: relay on member %d of %d", i, cfg.Members)
		}
	}
	l, err := New()
	if err != nil {
		return nil, err
	}
	s := &Star{Lab: l, Bridge: "br0"}
	if err := s.build(cfg); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return s, nil
}

// StarT is NewStar for tests: it skips tb when unprivileged, fails it on
// error and closes the lab when tb ends.
func StarT(tb testing.TB, cfg StarConfig) *Star {
	tb.Helper()
	Privileged(tb)
	testenv.Tool(tb, "ethtool", "install ethtool")
	s, err := NewStar(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// Close removes the star's lab.
func (s *Star) Close() error { return s.Lab.Close() }

func (s *Star) build(cfg StarConfig) error {
	l := s.Lab
	var err error
	if s.Hub, err = l.AddNS("hub"); err != nil {
		return err
	}
	if err := s.Hub.IP("link", "add", "name", s.Bridge, "type", "bridge", "mcast_snooping", "0"); err != nil {
		return err
	}
	if err := s.Hub.Sysctl("net.ipv6.conf."+s.Bridge+".disable_ipv6", "1"); err != nil {
		return err
	}
	if err := s.Hub.IP("link", "set", "dev", s.Bridge, "up"); err != nil {
		return err
	}
	hostCfg := cfg.Link
	hostCfg.Bare = false
	if len(cfg.Relays) > 0 {
		hostCfg.NoOffload = true
	}
	bareCfg := hostCfg
	bareCfg.Bare = true
	s.Members = make([]*Iface, cfg.Members)
	s.Relays = make([]*Relay, cfg.Members)
	s.Ports = make([]*Iface, cfg.Members)
	var ports []*Iface // hub-side ends to wait for
	for i := range cfg.Members {
		m, err := l.AddNS("m" + strconv.Itoa(i))
		if err != nil {
			return err
		}
		em, eh, err := l.connectMixed(m, s.Hub, hostCfg, bareCfg)
		if err != nil {
			return err
		}
		s.Members[i] = em
		ports = append(ports, eh)
		port := eh
		if rc, ok := cfg.Relays[i]; ok {
			bp, rp, err := s.innerPair(i, em.MTU, bareCfg)
			if err != nil {
				return err
			}
			for _, e := range []*Iface{eh, rp} {
				if err := e.NS.IP("link", "set", "dev", e.Name, "promisc", "on"); err != nil {
					return err
				}
			}
			if s.Relays[i], err = l.StartRelay(rp, eh, rc); err != nil {
				return err
			}
			port = bp
			ports = append(ports, bp, rp)
		}
		s.Ports[i] = port
		if err := s.Hub.IP("link", "set", "dev", port.Name, "master", s.Bridge); err != nil {
			return err
		}
		if err := m.IP("route", "add", "224.0.0.0/4", "dev", em.Name); err != nil {
			return err
		}
	}
	for _, e := range append(ports, s.Members...) {
		if err := e.Up(5 * time.Second); err != nil {
			return err
		}
	}
	for _, a := range s.Members {
		for _, b := range s.Members {
			if a != b {
				if err := a.AddNeighbor(b); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// innerPair makes the hub's veth pair of member i's relayed leg: bp becomes
// the bridge port, rp the relay's other interface.
func (s *Star) innerPair(i, mtu int, bareCfg LinkConfig) (bp, rp *Iface, err error) {
	bn, rn := "b"+strconv.Itoa(i)+"br", "b"+strconv.Itoa(i)+"rl"
	if err := ipCmd("link", "add", "name", bn, "netns", s.Hub.Name, "mtu", strconv.Itoa(mtu),
		"type", "veth", "peer", "name", rn, "netns", s.Hub.Name, "mtu", strconv.Itoa(mtu)); err != nil {
		return nil, nil, err
	}
	if bp, err = s.Lab.setupEnd(s.Hub, bn, mtu, bareCfg); err != nil {
		return nil, nil, err
	}
	if rp, err = s.Lab.setupEnd(s.Hub, rn, mtu, bareCfg); err != nil {
		return nil, nil, err
	}
	return bp, rp, nil
}
