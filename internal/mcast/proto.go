// Package mcast is the file transfer of `xdproce mcast send` and `mcast
// recv` (docs/ooo.md, "Broadcast and multicast"): one stream of OOO WRITEs
// to a multicast group places a file in every member's memory at once;
// members acknowledge each operation unicast, and the sender retries only
// the members that did not, unicast, on their own group contexts.
//
// The control exchange is UDP: members announce themselves on the group's
// control port; the sender answers each unicast with an offer (its queue
// pair, the file's name, size and SHA-256, the group contexts); the member
// answers ready; after the data, done and the member's result. Every
// datagram carries an HMAC-SHA256 under the pre-shared key (Config.PSK),
// and every answer echoes the other side's fresh nonce, so a datagram from
// another session or without the key is ignored (counted).
package mcast

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/xdproce/xdproce/roce"
)

// DefaultPort is the control port on the group.
const DefaultPort = 18519

// Message kinds.
const (
	kindHello  = "hello"  // member → group: here I am
	kindOffer  = "offer"  // sender → member: the transfer
	kindReady  = "ready"  // member → sender: contexts defined, connected
	kindDone   = "done"   // sender → member: every operation acknowledged (or the member given up)
	kindResult = "result" // member → sender: the file checked and written, or why not
)

// msg is one control datagram's body.
type msg struct {
	Kind    string `json:"kind"`
	Member  uint64 `json:"member"`            // the member's nonce for this round
	Session uint64 `json:"session,omitempty"` // the sender's nonce for this transfer
	GID     string `json:"gid,omitempty"`     // the sender's of the offer, the member's of the hello
	QPN     uint32 `json:"qpn,omitempty"`     // the queue pair of GID
	// offer
	Name    string `json:"name,omitempty"`
	Size    int64  `json:"size,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	CtxBase uint32 `json:"ctx_base,omitempty"` // group context ids CtxBase..CtxBase+Ctxs-1
	CtxKey  uint8  `json:"ctx_key,omitempty"`
	Ctxs    int    `json:"ctxs,omitempty"`
	// done, result
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

// ctl is one side's control channel: the datagrams that pass
// authentication go to in (dropped when in is full: they are repeated).
type ctl struct {
	key []byte
	log *slog.Logger
	in  chan packet
}

// packet is a received control datagram.
type packet struct {
	m    *msg
	from *net.UDPAddr
}

// read feeds c's authenticated datagrams to in until c is closed.
func (t *ctl) read(c *net.UDPConn) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := c.ReadFromUDP(buf)
		if err != nil {
			return
		}
		m, err := open(t.key, buf[:n])
		if err != nil {
			t.log.Debug("control datagram ignored", "from", from, "err", err)
			continue
		}
		select {
		case t.in <- packet{m, from}:
		default:
		}
	}
}

// send sends m to to from c.
func (t *ctl) send(c *net.UDPConn, to *net.UDPAddr, m *msg) {
	if _, err := c.WriteToUDP(seal(t.key, m), to); err != nil {
		t.log.Warn("control datagram not sent", "to", to, "err", err)
	}
}

// macLen prefixes every datagram: HMAC-SHA256(PSK, body).
const macLen = sha256.Size

// seal returns the datagram of m under key.
func seal(key []byte, m *msg) []byte {
	body, _ := json.Marshal(m) // plain fields: cannot fail
	h := hmac.New(sha256.New, key)
	h.Write(body)
	return append(h.Sum(nil), body...)
}

// errBadMAC: a datagram not sealed with this side's key.
var errBadMAC = errors.New("mcast: control datagram fails authentication")

// open checks and decodes a datagram.
func open(key, b []byte) (*msg, error) {
	if len(b) < macLen {
		return nil, errBadMAC
	}
	h := hmac.New(sha256.New, key)
	h.Write(b[macLen:])
	if !hmac.Equal(h.Sum(nil), b[:macLen]) {
		return nil, errBadMAC
	}
	var m msg
	if err := json.Unmarshal(b[macLen:], &m); err != nil {
		return nil, fmt.Errorf("mcast: control datagram: %w", err)
	}
	return &m, nil
}

// localAddr is the interface's first address of group's family (IPv6: a
// global one): the side's GID and control address.
func localAddr(ifi *net.Interface, group netip.Addr) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("mcast: addresses of %s: %w", ifi.Name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() == group.Is4() && !ip.IsLinkLocalUnicast() {
				return ip.Unmap(), nil
			}
		}
	}
	fam := "IPv4"
	if group.Is6() {
		fam = "global IPv6"
	}
	return netip.Addr{}, fmt.Errorf("mcast: %s has no %s address (for group %v)", ifi.Name, fam, group)
}

// CheckGroup refuses what is not a multicast group.
func CheckGroup(g netip.Addr) error {
	if !g.IsMulticast() || g.Is4In6() || g.Zone() != "" {
		return fmt.Errorf("group %v: want an IPv4 or IPv6 multicast address (239.0.0.0/8 and ff15::/16 are local to an organisation or site)", g)
	}
	return nil
}

// CheckDest accepts a multicast group (CheckGroup) or an IPv4 broadcast
// address of ifi (255.255.255.255 or its subnet's).
func CheckDest(g netip.Addr, ifi *net.Interface) error {
	if !g.IsMulticast() && g.Is4() && roce.IsBroadcastOf(ifi.Index, g) {
		return nil
	}
	if err := CheckGroup(g); err != nil {
		return fmt.Errorf("%w, or a broadcast address of %s", err, ifi.Name)
	}
	return nil
}

// sameFamily parses a peer's GID and checks it is of group's family.
func sameFamily(gid string, group netip.Addr) (netip.Addr, bool) {
	a, err := netip.ParseAddr(gid)
	return a, err == nil && a.Is4() == group.Is4() && a.Zone() == ""
}
