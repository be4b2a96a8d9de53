package qp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// victim is a responder QP (0x12, expecting PSN 0x100 from QP 0x11) fed with
// hand-built packets.
type victim struct {
	e      *end
	rw, ro *mr.MR // a REMOTE_WRITE|REMOTE_READ|ATOMIC region and a local-only one
	recv   *mr.MR
	now    int64
	peer   netip.Addr // the address its packets come from (QP 0x11's)
}

func newVictim(t *testing.T) *victim { return newVictimOpts(t, defaultOpts()) }

func newVictimOpts(t *testing.T, o pairOpts) *victim {
	o.noConnect = true
	p := newPair(t, o)
	connect(t, p.b, p.a, o, 0x500, 0x100)
	v := &victim{e: p.b, peer: p.a.ip}
	v.rw, _ = p.b.reg(t, 8192, allAcc)
	v.ro, _ = p.b.reg(t, 8192, mr.LocalWrite)
	v.recv, _ = p.b.reg(t, 8192, mr.LocalWrite)
	return v
}

func (v *victim) pkt(op wire.Opcode, psn uint32, payload int) *wire.Packet {
	p := &wire.Packet{SrcIP: v.peer, DstIP: v.e.ip}
	p.BTH = wire.BTH{Opcode: op, PKey: 0xFFFF, DestQPN: 0x12, PSN: psn, AckReq: true}
	p.Payload = make([]byte, payload)
	for i := range p.Payload {
		p.Payload[i] = 0xAB
	}
	return p
}

// feed delivers p and returns the decoded frames the victim sent.
func (v *victim) feed(t *testing.T, p *wire.Packet) []wire.Packet {
	t.Helper()
	v.now += 1000
	v.e.q.Receive(p, v.now, v.e.out)
	v.e.q.Progress(v.now, v.e.out)
	var out []wire.Packet
	for _, f := range v.e.out.committed {
		var d wire.Packet
		must(t, d.Decode(f))
		out = append(out, d)
	}
	v.e.out.committed = v.e.out.committed[:0]
	v.e.out.free = len(v.e.out.pool)
	return out
}

func expectOne(t *testing.T, what string, got []wire.Packet, syndrome uint8, psn uint32) {
	t.Helper()
	if len(got) != 1 || got[0].BTH.Opcode != wire.RCAck || got[0].AETH.Syndrome != syndrome || got[0].BTH.PSN != psn {
		t.Fatalf("%s: sent %v, want one ACK syndrome %#x PSN %#x", what, summary(got), syndrome, psn)
	}
}

func summary(ps []wire.Packet) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.BTH.Opcode.String()+" "+p.AETH.String())
	}
	return s
}

func TestCraftedSequenceErrors(t *testing.T) {
	t.Run("psn ahead: one NAK, then silence", func(t *testing.T) {
		v := newVictim(t)
		must(t, v.e.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(v.recv, 0, 8192)}}))
		expectOne(t, "ahead", v.feed(t, v.pkt(wire.RCSendOnly, 0x105, 10)), wire.NAKPSNSeqErr, 0x100)
		if got := v.feed(t, v.pkt(wire.RCSendOnly, 0x106, 10)); len(got) != 0 {
			t.Fatalf("second out-of-order packet answered: %v", summary(got))
		}
		expectOne(t, "expected", v.feed(t, v.pkt(wire.RCSendOnly, 0x100, 10)), 0x1F, 0x100)
		// A duplicate with AckReq is acknowledged again (at the last PSN done).
		expectOne(t, "duplicate", v.feed(t, v.pkt(wire.RCSendOnly, 0x100, 10)), 0x1F, 0x100)
		if v.e.q.State() != RTS {
			t.Fatalf("state %v", v.e.q.State())
		}
	})
	t.Run("missing last: class C, receive WQE in error", func(t *testing.T) {
		v := newVictim(t)
		must(t, v.e.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(v.recv, 0, 8192)}}))
		must(t, v.e.q.PostRecv(&RecvWR{ID: 2, SGL: []mr.SGE{sge(v.recv, 0, 8192)}}))
		first := v.pkt(wire.RCSendFirst, 0x100, 1024)
		first.BTH.AckReq = false
		if got := v.feed(t, first); len(got) != 0 {
			t.Fatalf("FIRST answered: %v", summary(got))
		}
		expectOne(t, "SEND_ONLY inside a SEND", v.feed(t, v.pkt(wire.RCSendOnly, 0x101, 10)), wire.NAKInvalidRequest, 0x101)
		wcs := make([]WC, 4)
		n, _ := v.e.cq.Poll(wcs)
		if n != 2 || wcs[0].ID != 1 || wcs[0].Status != WCRemInvReqErr || wcs[1].Status != WCWRFlushErr {
			t.Fatalf("receive WCs %+v", wcs[:n])
		}
		if v.e.q.State() != Error {
			t.Fatalf("state %v", v.e.q.State())
		}
		if got := v.feed(t, v.pkt(wire.RCSendOnly, 0x102, 10)); len(got) != 0 {
			t.Fatalf("QP in Error answered: %v", summary(got))
		}
	})
	for _, tc := range []struct {
		name  string
		build func(v *victim) *wire.Packet
		nak   uint8
	}{
		{"middle without first", func(v *victim) *wire.Packet { return v.pkt(wire.RCSendMiddle, 0x100, 1024) }, wire.NAKInvalidRequest},
		{"first shorter than the MTU", func(v *victim) *wire.Packet { return v.pkt(wire.RCSendFirst, 0x100, 512) }, wire.NAKInvalidRequest},
		{"write only longer than its RETH", func(v *victim) *wire.Packet {
			p := v.pkt(wire.RCWriteOnly, 0x100, 100)
			p.RETH = wire.RETH{VA: v.rw.Addr(), RKey: v.rw.RKey(), DMALen: 50}
			return p
		}, wire.NAKInvalidRequest},
		{"write into a local-only region", func(v *victim) *wire.Packet {
			p := v.pkt(wire.RCWriteOnly, 0x100, 100)
			p.RETH = wire.RETH{VA: v.ro.Addr(), RKey: v.ro.RKey(), DMALen: 100}
			return p
		}, wire.NAKRemoteAccess},
		{"write past the end", func(v *victim) *wire.Packet {
			p := v.pkt(wire.RCWriteFirst, 0x100, 1024)
			p.RETH = wire.RETH{VA: v.rw.Addr() + 4096, RKey: v.rw.RKey(), DMALen: 8192}
			return p
		}, wire.NAKRemoteAccess},
		{"misaligned atomic", func(v *victim) *wire.Packet {
			p := v.pkt(wire.RCFetchAdd, 0x100, 0)
			p.Atomic = wire.AtomicETH{VA: v.rw.Addr() + 4, RKey: v.rw.RKey(), SwapAdd: 1}
			return p
		}, wire.NAKInvalidRequest},
		{"read past the end", func(v *victim) *wire.Packet {
			p := v.pkt(wire.RCReadRequest, 0x100, 0)
			p.RETH = wire.RETH{VA: v.rw.Addr() + 8000, RKey: v.rw.RKey(), DMALen: 200}
			return p
		}, wire.NAKRemoteAccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVictim(t)
			must(t, v.e.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(v.recv, 0, 8192)}}))
			before := [][]byte{bytes.Clone(v.rw.Bytes()), bytes.Clone(v.ro.Bytes())}
			expectOne(t, tc.name, v.feed(t, tc.build(v)), tc.nak, 0x100)
			if !bytes.Equal(before[0], v.rw.Bytes()) || !bytes.Equal(before[1], v.ro.Bytes()) {
				t.Fatal("memory changed")
			}
			if v.e.q.State() != Error {
				t.Fatalf("state %v, want ERR", v.e.q.State())
			}
		})
	}
	t.Run("foreign transport dropped", func(t *testing.T) {
		v := newVictim(t)
		for _, op := range []wire.Opcode{wire.UCSendOnly, wire.UDSendOnly, wire.CNP, 0x1F} {
			if got := v.feed(t, v.pkt(op, 0x100, 0)); len(got) != 0 {
				t.Fatalf("%v answered: %v", op, summary(got))
			}
		}
		// The CNP is counted as ignored (no DCQCN on this queue pair), the rest dropped.
		if s := v.e.q.Stats(); v.e.q.State() != RTS || s.Get(CtrDropped) != 3 || s.Get(CtrCNPIgnored) != 1 {
			t.Fatalf("state %v, dropped %d, rp_cnp_ignored %d", v.e.q.State(), s.Get(CtrDropped), s.Get(CtrCNPIgnored))
		}
	})
}

// TestCraftedSendWithInvalidate: a SEND with Invalidate may withdraw only the
// rkey of a region registered with mr.RemoteInvalidate (rxe: fast-registration
// regions only). Any other key fails as in rxe (class J): the data lands, the
// receive WQE completes with REM_INV_REQ_ERR, the SEND is acknowledged (no
// NAK; the MSN does not advance), the QP goes to Error, and the key stays
// valid.
func TestCraftedSendWithInvalidate(t *testing.T) {
	refused := func(t *testing.T, v *victim, key uint32, ps ...*wire.Packet) {
		t.Helper()
		must(t, v.e.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(v.recv, 0, 8192)}}))
		must(t, v.e.q.PostRecv(&RecvWR{ID: 2, SGL: []mr.SGE{sge(v.recv, 0, 8192)}}))
		var got []wire.Packet
		for _, p := range ps {
			got = append(got, v.feed(t, p)...)
		}
		last := ps[len(ps)-1]
		if last.BTH.AckReq {
			expectOne(t, "refused SEND with Invalidate", got, wire.ACKSyndrome(wire.UnlimitedCredits), last.BTH.PSN)
			if got[0].AETH.MSN != 0 {
				t.Errorf("ACK MSN %d, want 0 (the message did not complete)", got[0].AETH.MSN)
			}
		} else if len(got) != 0 {
			t.Fatalf("sent %v, want nothing", summary(got))
		}
		wcs := make([]WC, 4)
		n, _ := v.e.cq.Poll(wcs)
		if n != 2 || wcs[0].ID != 1 || wcs[0].Status != WCRemInvReqErr || wcs[1].ID != 2 || wcs[1].Status != WCWRFlushErr {
			t.Fatalf("receive WCs %+v, want REM_INV_REQ_ERR then WR_FLUSH_ERR", wcs[:n])
		}
		if v.e.q.State() != Error {
			t.Fatalf("state %v, want ERR", v.e.q.State())
		}
		if key != 0 {
			if _, err := v.e.tbl.Remote(v.e.pd, nil, key, v.rw.Addr(), 8, mr.RemoteWrite); err != nil {
				t.Fatalf("the region's rkey after a refused invalidate: %v", err)
			}
		}
	}
	inv := func(v *victim, op wire.Opcode, psn uint32, n int, key uint32) *wire.Packet {
		p := v.pkt(op, psn, n)
		p.IETH = key
		return p
	}
	t.Run("ordinary region", func(t *testing.T) {
		v := newVictim(t)
		refused(t, v, v.rw.RKey(), inv(v, wire.RCSendOnlyInv, 0x100, 8, v.rw.RKey()))
		if !bytes.Equal(v.recv.Bytes()[:8], bytes.Repeat([]byte{0xAB}, 8)) {
			t.Error("the SEND's data did not land (rxe places it before the invalidate fails)")
		}
	})
	t.Run("ordinary region, multi-packet, no AckReq", func(t *testing.T) {
		v := newVictim(t)
		first := v.pkt(wire.RCSendFirst, 0x100, 1024)
		first.BTH.AckReq = false
		last := inv(v, wire.RCSendLastInv, 0x101, 10, v.rw.RKey())
		last.BTH.AckReq = false
		refused(t, v, v.rw.RKey(), first, last)
	})
	t.Run("unknown key", func(t *testing.T) {
		v := newVictim(t)
		refused(t, v, 0, inv(v, wire.RCSendOnlyInv, 0x100, 8, v.rw.RKey()^0x5A5A))
	})
	t.Run("another PD's region", func(t *testing.T) {
		v := newVictim(t)
		other, err := v.e.tbl.AllocPD().Register(make([]byte, 64), mr.LocalWrite|mr.RemoteWrite|mr.RemoteInvalidate)
		must(t, err)
		refused(t, v, 0, inv(v, wire.RCSendOnlyInv, 0x100, 8, other.RKey()))
		if _, err := v.e.tbl.Remote(other.PD(), nil, other.RKey(), other.Addr(), 8, mr.RemoteWrite); err != nil {
			t.Fatalf("the other PD's rkey: %v", err)
		}
	})
	t.Run("invalidatable region", func(t *testing.T) {
		v := newVictim(t)
		fr, _ := v.e.reg(t, 64, allAcc|mr.RemoteInvalidate)
		must(t, v.e.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(v.recv, 0, 8192)}}))
		expectOne(t, "SEND with Invalidate", v.feed(t, inv(v, wire.RCSendOnlyInv, 0x100, 8, fr.RKey())), 0x1F, 0x100)
		wcs := make([]WC, 2)
		if n, _ := v.e.cq.Poll(wcs); n != 1 || wcs[0].Status != WCSuccess || !wcs[0].WithInv || wcs[0].ImmData != fr.RKey() {
			t.Fatalf("receive WCs %+v", wcs[:n])
		}
		if _, err := v.e.tbl.Remote(v.e.pd, nil, fr.RKey(), fr.Addr(), 8, mr.RemoteWrite); err == nil {
			t.Fatal("rkey still valid after SEND with Invalidate")
		}
		// A WRITE with the invalidated key is a remote access error.
		w := v.pkt(wire.RCWriteOnly, 0x101, 8)
		w.RETH = wire.RETH{VA: fr.Addr(), RKey: fr.RKey(), DMALen: 8}
		expectOne(t, "WRITE with the invalidated key", v.feed(t, w), wire.NAKRemoteAccess, 0x101)
	})
}

// TestCraftedTooManyReadAtomic: a peer that ignores its max_rd_atomic sends
// more READ/atomic requests than the responder's max_dest_rd_atomic before
// any response can leave. The responder answers the first max_dest_rd_atomic
// in order, then NAKs the first excess request as an invalid request (IBA
// class C; rxe's ERR_TOO_MANY_RDMA_ATM_REQ) and goes to Error; nothing after
// it is executed.
func TestCraftedTooManyReadAtomic(t *testing.T) {
	for _, dest := range []uint8{1, 4, 16} {
		for _, atomic := range []bool{false, true} {
			name := fmt.Sprintf("max_dest_rd_atomic=%d/atomic=%v", dest, atomic)
			t.Run(name, func(t *testing.T) {
				o := defaultOpts()
				o.destRdAtom = dest
				v := newVictimOpts(t, o)
				ctr := v.rw.Bytes()[64:72]
				clear(ctr)
				const burst = 40
				for i := range uint32(burst) {
					p := v.pkt(wire.RCReadRequest, 0x100+i, 0)
					p.RETH = wire.RETH{VA: v.rw.Addr() + uint64(i), RKey: v.rw.RKey(), DMALen: 16}
					if atomic {
						p.BTH.Opcode = wire.RCFetchAdd
						p.Atomic = wire.AtomicETH{VA: v.rw.Addr() + 64, RKey: v.rw.RKey(), SwapAdd: 1}
					}
					v.now += 1000
					v.e.q.Receive(p, v.now, v.e.out) // the whole burst before any Progress
				}
				var got []wire.Packet
				for range 3 {
					got = append(got, v.feedNone(t)...)
				}
				if len(got) != int(dest)+1 {
					t.Fatalf("sent %d packets %v, want %d responses and a NAK", len(got), summary(got), dest)
				}
				for i, p := range got[:dest] {
					want := wire.RCReadResponseOnly
					if atomic {
						want = wire.RCAtomicAck
					}
					if p.BTH.Opcode != want || p.BTH.PSN != 0x100+uint32(i) {
						t.Fatalf("packet %d: %v PSN %#x, want %v PSN %#x", i, p.BTH.Opcode, p.BTH.PSN, want, 0x100+i)
					}
					if atomic && p.AtomicAck.Orig != uint64(i) {
						t.Fatalf("atomic ACK %d: orig %d, want %d", i, p.AtomicAck.Orig, i)
					}
				}
				nak := got[dest]
				if nak.BTH.Opcode != wire.RCAck || nak.AETH.Syndrome != wire.NAKInvalidRequest || nak.BTH.PSN != 0x100+uint32(dest) {
					t.Fatalf("last packet %v PSN %#x, want a NAK invalid request at PSN %#x", summary(got[dest:]), nak.BTH.PSN, 0x100+uint32(dest))
				}
				if atomic && binary.NativeEndian.Uint64(ctr) != uint64(dest) {
					t.Fatalf("counter %d after the burst, want %d (only the requests answered execute)", binary.NativeEndian.Uint64(ctr), dest)
				}
				if v.e.q.State() != Error {
					t.Fatalf("state %v, want ERR", v.e.q.State())
				}
				if n := v.e.q.Stats().Get(CtrErrNAKsSent); n != 1 {
					t.Fatalf("%d error NAKs counted, want 1", n)
				}
			})
		}
	}
	t.Run("honest requester at the limit", func(t *testing.T) {
		// max_dest_rd_atomic requests at once, then one more after each
		// response: never refused, even with a stale replay of the oldest
		// one queued when the next request arrives.
		o := defaultOpts()
		o.destRdAtom = 2
		v := newVictimOpts(t, o)
		read := func(psn uint32) *wire.Packet {
			p := v.pkt(wire.RCReadRequest, psn, 0)
			p.RETH = wire.RETH{VA: v.rw.Addr(), RKey: v.rw.RKey(), DMALen: 16}
			return p
		}
		v.e.q.Receive(read(0x100), v.now, v.e.out)
		v.e.q.Receive(read(0x101), v.now, v.e.out)
		if got := v.feedNone(t); len(got) != 2 {
			t.Fatalf("sent %v, want 2 READ responses", summary(got))
		}
		for psn := uint32(0x102); psn < 0x110; psn++ {
			// The requester completed psn-2 and sends psn; a late
			// duplicate of psn-2 arrives just before it.
			v.e.q.Receive(read(psn-2), v.now, v.e.out)
			v.e.q.Receive(read(psn), v.now, v.e.out)
			got := v.feedNone(t)
			if len(got) == 0 || got[len(got)-1].BTH.PSN != psn || got[len(got)-1].BTH.Opcode != wire.RCReadResponseOnly {
				t.Fatalf("PSN %#x: sent %v", psn, summary(got))
			}
		}
		if v.e.q.State() != RTS {
			t.Fatalf("state %v, want RTS", v.e.q.State())
		}
	})
}

// feedNone runs Progress once and returns the decoded frames the victim sent.
func (v *victim) feedNone(t *testing.T) []wire.Packet {
	t.Helper()
	v.now += 1000
	v.e.q.Progress(v.now, v.e.out)
	var out []wire.Packet
	for _, f := range v.e.out.committed {
		var d wire.Packet
		must(t, d.Decode(f))
		out = append(out, d)
	}
	v.e.out.committed = v.e.out.committed[:0]
	v.e.out.free = len(v.e.out.pool)
	return out
}

// TestCraftedWrongSource: an RC WRITE with the right QPN, PSN and rkey but
// from another address than the connected peer's, or to another of this
// host's addresses, is dropped without an answer and writes nothing (rxe's
// check_addr); the same packet from the peer then lands and is ACKed.
func TestCraftedWrongSource(t *testing.T) {
	v := newVictim(t)
	write := func() *wire.Packet {
		p := v.pkt(wire.RCWriteOnly, 0x100, 64)
		p.RETH = wire.RETH{VA: v.rw.Addr(), RKey: v.rw.RKey(), DMALen: 64}
		return p
	}
	other := netip.MustParseAddr("203.0.113.9")
	for _, c := range []struct {
		name     string
		src, dst netip.Addr
	}{{"another source", other, v.e.ip}, {"another destination", v.peer, other}} {
		p := write()
		p.SrcIP, p.DstIP = c.src, c.dst
		dropped := v.e.q.Stats().Get(CtrDropped)
		if got := v.feed(t, p); len(got) != 0 {
			t.Fatalf("%s: sent %v, want nothing", c.name, summary(got))
		}
		if !bytes.Equal(v.rw.Bytes()[:64], make([]byte, 64)) {
			t.Fatalf("%s: the WRITE landed", c.name)
		}
		if d := v.e.q.Stats().Get(CtrDropped) - dropped; d != 1 {
			t.Fatalf("%s: %d packets counted dropped, want 1", c.name, d)
		}
	}
	got := v.feed(t, write())
	expectOne(t, "WRITE from the peer", got, wire.ACKSyndrome(wire.UnlimitedCredits), 0x100)
	if !bytes.Equal(v.rw.Bytes()[:64], bytes.Repeat([]byte{0xAB}, 64)) {
		t.Fatal("the WRITE from the peer did not land")
	}
}
