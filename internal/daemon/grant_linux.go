package daemon

import (
	"fmt"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/wire"
)

// Placement on the first hop (docs/placement.md): a client registers the
// rkey of each region it shares (proto.OpPlaceKey: PD, access, the
// addresses the rkey names), and its responder's engine grants the daemon a
// queue pair (an Ans with place.FlagGrant: ready to send, its peer, the PSN
// it expects, its PD and access). A WRITE or READ for a granted queue pair
// at the PSN it expects, whose rkey is registered, in bounds, of the queue
// pair's PD and allowing the operation, is then checked and copied by the
// daemon when the requester's request arrives; the daemon answers the
// requester with the ACK and tells the responder's engine to advance its
// expected PSN (Note). Anything else (a receive WQE to take, an rkey the
// daemon does not know, a PSN out of order, an error to answer) goes to the
// responder as before (Ind), and that clears the grant until its answer
// grants again. Revocation: deregistering a region drops its rkeys under
// memMu; a queue pair modified or destroyed is revoked (proto.OpRevokeQP)
// before the verb returns, and grants its engine sent before then are
// refused by tag; a responder that finds a Note it cannot take (the queue
// pair went to Error, the PSN moved) revokes the grant on its port.

// maxKeys bounds a client's registered rkeys.
const maxKeys = maxRegions

// rkeyEntry is a registered rkey: the region it names, from region offset
// off, addressed by the peer from va for n bytes.
type rkeyEntry struct {
	region uint32
	pd     uint32
	access mr.Access
	va     uint64
	off    uint64
	n      uint64
}

// grant is what the daemon knows of one of a client's responder queue
// pairs (guarded by client.grMu).
type grant struct {
	known     bool   // granted: the daemon may place WRITEs and READs itself
	peer      uint32 // the requester's QPN
	pd        uint32
	access    mr.Access
	epsn, msn uint32 // the PSN expected next and the message sequence number
	lastTag   uint32 // the last request indicated to the responder
	revokedAt uint32 // no grant from answers to requests up to this tag
}

// tagAfter reports whether tag a was issued after b (tags wrap around).
func tagAfter(a, b uint32) bool { return int32(a-b) > 0 }

// addKey registers rkey of c's region: n bytes of it from off, addressed
// from va.
func (d *Daemon) addKey(c *client, region, rkey, pd uint32, access mr.Access, va, off, n uint64) error {
	d.memMu.Lock()
	defer d.memMu.Unlock()
	mem, ok := c.mem.m[region]
	switch {
	case !ok:
		return fmt.Errorf("no region %d", region)
	case n == 0 || off > uint64(len(mem)) || n > uint64(len(mem))-off:
		return fmt.Errorf("%d bytes at %d not in region %d of %d bytes", n, off, region, len(mem))
	case va+n-1 < va:
		return fmt.Errorf("va %#x + %d wraps around", va, n)
	case access&mr.RemoteInvalidate != 0:
		return fmt.Errorf("rkey %#x may be invalidated by a peer: not registered", rkey)
	case c.mem.keys[rkey].n == 0 && len(c.mem.keys) >= maxKeys:
		return fmt.Errorf("client holds its limit of %d rkeys", maxKeys)
	}
	if c.mem.keys == nil {
		c.mem.keys = map[uint32]rkeyEntry{}
	}
	c.mem.keys[rkey] = rkeyEntry{region: region, pd: pd, access: access, va: va, off: off, n: n}
	return nil
}

// dropKeys forgets c's rkeys of region (with memMu held for writing).
func (c *client) dropKeys(region uint32) {
	for k, e := range c.mem.keys {
		if e.region == region {
			delete(c.mem.keys, k)
		}
	}
}

// grantOf is c's grant for qpn, made on first use (grMu held); nil for a
// QPN not c's.
func (c *client) grantOf(qpn uint32) *grant {
	if qpn < c.first || qpn > c.last {
		return nil
	}
	g := c.grants[qpn]
	if g == nil {
		if c.grants == nil {
			c.grants = map[uint32]*grant{}
		}
		g = &grant{}
		c.grants[qpn] = g
	}
	return g
}

// indicated records that request tag went to to's queue pair qpn (the
// responder decides: the grant is off until an answer grants again).
func (to *client) indicated(qpn, tag uint32) {
	to.grMu.Lock()
	if g := to.grantOf(qpn); g != nil {
		g.known, g.lastTag = false, tag
	}
	to.grMu.Unlock()
}

// granted takes the grant in c's answer m to request e.
func (d *Daemon) granted(c *client, m *place.Msg, e *pending) {
	c.grMu.Lock()
	defer c.grMu.Unlock()
	g := c.grantOf(e.dstQPN)
	if g == nil || g.lastTag != e.tag || !tagAfter(e.tag, g.revokedAt) {
		return // a later request went to the responder, or a revocation came after
	}
	*g = grant{known: true, peer: e.srcQPN, pd: m.RKey, access: mr.Access(m.Imm), epsn: wire.PSNAdd(m.PSN, 1),
		msn: m.MSN, lastTag: g.lastTag, revokedAt: g.revokedAt}
}

// revoke forgets c's grant for qpn: when it returns no copy on it runs
// (they hold grMu) and no answer indicated before grants it again.
func (d *Daemon) revoke(c *client, qpn uint32) error {
	if qpn < c.first || qpn > c.last {
		return fmt.Errorf("qpn %#x not the client's", qpn)
	}
	d.pt.mu.Lock()
	now := d.pt.next
	d.pt.mu.Unlock()
	c.grMu.Lock()
	if g := c.grants[qpn]; g != nil {
		g.known, g.revokedAt = false, now
	}
	c.grMu.Unlock()
	return nil
}

// revokePeers forgets every grant whose requester is one of gone's QPNs
// (gone is leaving: another client may get its QPNs).
func (d *Daemon) revokePeers(gone *client) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.clients {
		c.grMu.Lock()
		for _, g := range c.grants {
			if g.peer >= gone.first && g.peer <= gone.last {
				g.known = false
			}
		}
		c.grMu.Unlock()
	}
}

// placeGranted places m (a WRITE or READ from c, its segments checked)
// on to's grant; false: the responder must decide (indicate it).
func (d *Daemon) placeGranted(c, to *client, m *place.Msg) bool {
	need := mr.RemoteWrite
	if m.Op.Reads() {
		need = mr.RemoteRead
	}
	to.grMu.Lock()
	defer to.grMu.Unlock()
	g := to.grants[m.DstQPN]
	if g == nil || !g.known || g.peer != m.SrcQPN || g.epsn != m.PSN || g.access&need == 0 {
		return false
	}
	d.memMu.RLock()
	defer d.memMu.RUnlock()
	var ws [1]place.Seg
	if m.Len > 0 {
		k, ok := to.mem.keys[m.RKey]
		if !ok || k.pd != g.pd || k.access&need == 0 || m.VA < k.va || m.VA-k.va > k.n || uint64(m.Len) > k.n-(m.VA-k.va) {
			return false
		}
		ws[0] = place.Seg{Region: k.region, Off: k.off + (m.VA - k.va), Len: m.Len}
	}
	nsegs := 0
	if m.Len > 0 {
		nsegs = 1
	}
	if !inRegions(c, to, m.Segs(), ws[:nsegs]) {
		return false // a region went since the request was checked: the responder decides
	}
	note := place.Msg{Kind: place.KindNote, Op: m.Op, SrcQPN: m.SrcQPN, DstQPN: m.DstQPN, PSN: m.PSN,
		NPkts: m.NPkts, Len: m.Len}
	if !c.placeSend(to, &note, true) {
		return true // the responder's port is full: dropped, the requester resends
	}
	d.copySegs(c, to, m.Segs(), ws[:nsegs], m.Op.Reads())
	g.epsn = wire.PSNAdd(m.PSN, m.NPkts)
	g.msn = (g.msn + 1) & wire.PSNMask
	ack := place.Msg{Kind: place.KindAck, Status: place.AETH, SrcQPN: m.SrcQPN, DstQPN: m.DstQPN,
		Syndrome: wire.ACKSyndrome(wire.UnlimitedCredits), PSN: wire.PSNAdd(m.PSN, m.NPkts-1), MSN: g.msn}
	d.plMu.Lock()
	d.pl.placed++
	d.pl.placedBytes += uint64(m.Len)
	d.pl.granted++
	d.plMu.Unlock()
	c.placeSend(c, &ack, false)
	return true
}
