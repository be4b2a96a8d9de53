package reliability

import (
	"bytes"
	"testing"

	"github.com/xdproce/xdproce/roce/wire"
)

// TestOOOFramesRefused: the OOO opcodes (docs/ooo-wire.md) are not
// negotiated by a standard device, so well-formed OOO frames with a good
// ICRC, addressed to its RC, UC and UD queue pairs with live rkeys, are
// dropped as malformed (unknown opcode), as before the opcodes existed: no
// byte of memory changes, nothing is answered, and the honest queue pair
// keeps working.
func TestOOOFramesRefused(t *testing.T) {
	vt := newVictim(t)
	t.Cleanup(vt.close)
	vt.setup(t)
	rw := vt.slots[slotRW]
	base := wire.Packet{
		SrcIP: attackerIP, DstIP: victimIP, TTL: 64, SrcPort: 0xC000, DstPort: wire.UDPPort,
		BTH: wire.BTH{PKey: 0xFFFF},
		XRH: wire.XRH{Ctx: wire.MakeCtx(1, 1), TID: 1, Initiator: wire.MakeCtx(2, 1), Notify: wire.NotifyBoth, Seg: wire.MTU256},
	}
	copy(base.DstMAC[:], vt.v.HWAddr())
	copy(base.SrcMAC[:], vt.p.HWAddr())
	var frames [][]byte
	for _, qpn := range []uint32{vt.rc.QPN(), vt.uc.QPN(), vt.ud.QPN()} {
		for _, op := range []wire.Opcode{wire.OOOWrite, wire.OOOReadReq, wire.OOOCompletion, wire.OOO3PReadReq, wire.OOO3PWrite} {
			p := base
			p.BTH.Opcode, p.BTH.DestQPN = op, qpn
			info, _ := op.Info()
			if info.Kind == wire.KindWrite {
				p.Payload = bytes.Repeat([]byte{0xEE}, 64)
				p.RETH = wire.RETH{VA: rw.addr, RKey: rw.rkey, DMALen: 64}
				p.XRH.Total = 64
			} else if info.Kind == wire.KindReadRequest {
				p.RETH = wire.RETH{VA: rw.addr, RKey: rw.rkey, DMALen: 64}
				p.XRH.Total = 64
			}
			buf := make([]byte, maxFrameSize)
			n, err := p.Encode(buf)
			if err != nil {
				t.Fatalf("%v: %v", op, err)
			}
			var q wire.Packet
			if err := q.DecodeWith(buf[:n], wire.AcceptOOO); err != nil {
				t.Fatalf("%v: not a valid OOO frame: %v", op, err)
			}
			frames = append(frames, buf[:n])
		}
	}
	before := vt.v.Stats()
	vt.h.inject(frames)
	waitCounter(t, "victim receives the OOO frames", func() uint64 { return vt.v.Stats().RxFrames }, before.RxFrames+uint64(len(frames)))
	after := vt.v.Stats()
	if got := after.DropMalformed - before.DropMalformed; got != uint64(len(frames)) {
		t.Errorf("DropMalformed rose by %d, want %d (one per OOO frame); stats %+v", got, len(frames), after)
	}
	if after.DropBadICRC != before.DropBadICRC || after.DropUnknownQPN != before.DropUnknownQPN {
		t.Errorf("OOO frames counted elsewhere: before %+v, after %+v", before, after)
	}
	vt.mu.Lock()
	answered, naks, bad := vt.answered, vt.naks, append([]string(nil), vt.violations...)
	vt.mu.Unlock()
	bad = append(bad, vt.checkMemory()...)
	if answered != 0 || naks != 0 || len(bad) != 0 {
		t.Errorf("victim answered %d, NAKed %d; violations %q", answered, naks, bad)
	}
	// rw may legitimately change under RC traffic, so checkMemory allows
	// it; no OOO frame may change it.
	r := vt.regs[slotRW]
	if !bytes.Equal(vt.arena[r.off:r.off+r.n], vt.init[r.off:r.off+r.n]) {
		t.Error("an OOO_WRITE landed in the rw region")
	}
	vt.teardown(t)
	vt.honest(t)
}
