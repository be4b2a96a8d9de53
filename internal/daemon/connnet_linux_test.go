package daemon

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/daemon/proto"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/shm"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

// connsOf is the number of queue pairs the client owning qpn registered as
// connected, and the peer QPN qpn is registered with (0: none).
func connsOf(d *Daemon, qpn uint32) (n int, peer uint32) {
	c := d.owner(qpn)
	c.cn.mu.RLock()
	defer c.cn.mu.RUnlock()
	return len(c.cn.m), c.cn.m[qpn].qpn
}

// writeFrame is an RC WRITE ONLY with immediate frame from src to dst for
// queue pair dqpn at psn, putting data at va under rkey (the immediate
// completes a receive: the test learns of it without reading memory the
// engine may be writing).
func writeFrame(t testing.TB, src, dst netip.Addr, dqpn, psn uint32, va uint64, rkey uint32, data []byte) []byte {
	p := wire.Packet{SrcMAC: [6]byte{0x02, 6, 6, 6, 6, 6}, TTL: 64, SrcPort: 49999, DstPort: 4791, Payload: data,
		IPFlags: wire.IPv4DontFragment}
	p.SrcIP, p.DstIP = src, dst
	p.BTH = wire.BTH{Opcode: wire.RCWriteOnlyImm, PKey: 0xFFFF, DestQPN: dqpn, PSN: psn, AckReq: true}
	p.ImmDt = 0x600d
	p.RETH = wire.RETH{VA: va, RKey: rkey, DMALen: uint32(len(data))}
	b := make([]byte, 2048)
	n, err := p.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// sendFrames sends frames through a client's end of its port.
func sendFrames(t testing.TB, p *shm.Link, frames ...[]byte) {
	bufs := make([][]byte, len(frames))
	if n := p.Alloc(bufs); n != len(bufs) {
		t.Fatalf("alloc %d of %d", n, len(bufs))
	}
	for i, f := range frames {
		bufs[i] = bufs[i][:copy(bufs[i], f)]
	}
	if err := p.Send(bufs); err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedConnHostile: two daemon clients connected RC to each other
// register their queue pairs with Connect and move data; a third client
// crafting an RC WRITE into the victim's queue pair, at the PSN the victim
// expects, with its rkey and address, is dropped by the daemon and counted
// (the hostile client's and the daemon's drop_foreign_conn), the victim's
// memory unchanged and its connection still moving data. The same frame
// handed to the victim the way a frame from the wire is (the daemon does
// not check those) lands: it was valid for the victim's engine, which does
// not compare an RC frame's source address with its queue pair's peer as
// rxe's check_addr does. Reset and Destroy withdraw the registrations.
func TestPrivilegedConnHostile(t *testing.T) {
	netlab.Privileged(t)
	topo, x, y, d := daemonClientsIn(t)
	sx, sy := newScriptSide(t, x, 4096), newScriptSide(t, y, 4096) // ordinary memory: frames, no placement
	const psnX, psnY = 100, 5000
	if err := sx.qp.Connect(psnX, endpoint(t, y, sy.qp, psnY), nil); err != nil {
		t.Fatal(err)
	}
	if err := sy.qp.Connect(psnY, endpoint(t, x, sx.qp, psnX), nil); err != nil {
		t.Fatal(err)
	}
	if n, peer := connsOf(d, sy.qp.QPN()); n != 1 || peer != sx.qp.QPN() {
		t.Fatalf("the victim's registrations: %d, its queue pair's peer %#x (want %#x)", n, peer, sx.qp.QPN())
	}
	write := func(id uint64, off int, b byte) {
		t.Helper()
		for i := range 64 {
			sx.buf[off+i] = b
		}
		if err := sx.qp.PostSend(roce.SendWR{ID: id, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
			SGL:        []roce.SGE{{Addr: sx.mr.Addr() + uint64(off), Length: 64, LKey: sx.mr.LKey()}},
			RemoteAddr: sy.mr.Addr() + uint64(off), RKey: sy.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := sx.wait(t, 1); wc[0].Status != "IBV_WC_SUCCESS" || wc[0].ID != id {
			t.Fatalf("WRITE %d: %+v", id, wc)
		}
		if !bytes.Equal(sy.buf[off:off+64], sx.buf[off:off+64]) {
			t.Fatalf("WRITE %d did not land", id)
		}
	}
	for i := range 4 {
		write(uint64(i), i*64, byte('a'+i)) // one packet each: the victim expects psnX+4 next
	}

	// The hostile client: a raw attachment writing frames into its port.
	hc, hw, hp, err := proto.Dial(d.Socket(), "hostile", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	defer hp.Close()
	if err := sy.qp.PostRecv(roce.RecvWR{ID: 99}); err != nil { // for the immediate
		t.Fatal(err)
	}
	_, attr := sy.qp.Query()
	epsn := attr.RQPSN + 4
	local := topo.A.IPv4
	hostile := bytes.Repeat([]byte{'X'}, 64)
	const target = 3072
	sendFrames(t, hp, writeFrame(t, local, local, sy.qp.QPN(), epsn, sy.mr.Addr()+target, sy.mr.RKey(), hostile))
	hostileStats := func() (hs ClientStats) {
		for _, c := range d.Stats().Clients {
			if c.QPNFirst == hw.QPNFirst {
				hs = c
			}
		}
		return hs
	}
	for deadline := time.Now().Add(2 * time.Second); hostileStats().DropForeignConn == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	// Had it been passed, the victim's engine would have completed the
	// receive by now.
	time.Sleep(200 * time.Millisecond)
	if hs := hostileStats(); hs.FromClient != 1 || hs.DropForeignConn != 1 || d.Stats().DropForeignConn != 1 {
		t.Errorf("hostile client %+v, daemon drop_foreign_conn %d: want one frame, dropped", hs, d.Stats().DropForeignConn)
	}
	if n, err := sy.cq.Poll(make([]roce.WC, 4)); n != 0 || err != nil {
		t.Fatalf("the victim completed %d receives (%v): the hostile WRITE got in", n, err)
	}
	if !bytes.Equal(sy.buf[target:target+64], make([]byte, 64)) {
		t.Fatal("the hostile WRITE landed in the victim's memory")
	}
	write(10, 2048, 'L') // the connection goes on at the PSN the hostile frame named

	// The same frame at the PSN now expected, handed over as one from
	// the wire: the victim's engine takes it.
	f := writeFrame(t, local, local, sy.qp.QPN(), epsn+1, sy.mr.Addr()+target, sy.mr.RKey(), hostile)
	var h header
	if !parse(f, &h) {
		t.Fatal("the crafted frame does not parse")
	}
	d.steer(&h, f, nil)
	if wc := sy.wait(t, 1); wc[0].ID != 99 || wc[0].Status != "IBV_WC_SUCCESS" || wc[0].Imm != 0x600d ||
		!bytes.Equal(sy.buf[target:target+64], hostile) {
		t.Fatalf("the crafted WRITE passed: %+v, memory %q; the test's frame is not one the victim takes", wc, sy.buf[target:target+64])
	}

	if err := sx.qp.Modify(&roce.Attr{State: roce.StateReset}, roce.AttrState); err != nil {
		t.Fatal(err)
	}
	if n, _ := connsOf(d, sx.qp.QPN()); n != 0 {
		t.Errorf("%d registrations after Reset", n)
	}
	if err := sy.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if n, _ := connsOf(d, sy.qp.QPN()); n != 0 {
		t.Errorf("%d registrations after Destroy", n)
	}
}
