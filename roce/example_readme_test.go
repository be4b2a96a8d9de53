package roce_test

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// writeToPeer copies buf into a peer's memory with one RDMA WRITE over eth1. conn is a control
// connection to the peer (cm.Dial or a cm.Listener's Accept), which runs the same exchange.
func writeToPeer(ctx context.Context, conn *cm.Conn, buf []byte) error {
	dev, err := roce.Open("eth1", &roce.Options{Link: roce.LinkAuto}) // *roce.Device; or roce.NewDevice(anyLink, opts)
	if err != nil {
		return err
	}
	defer dev.Close()
	pd := dev.AllocPD()                                                       // *roce.PD
	m, err := pd.RegMR(buf, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead) // *roce.MR
	if err != nil {
		return err
	}
	cq, err := dev.CreateCQ(256) // *roce.CQ
	if err != nil {
		return err
	}
	q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq}) // *roce.QP
	if err != nil {
		return err
	}
	gid, err := dev.GID(1) // netip.Addr: 0 is the link-local GID, 1 the interface's IPv4 address
	if err != nil {
		return err
	}
	myPSN := rand.Uint32() & roce.PSNMask
	peer, err := cm.ExchangeRC(ctx, conn, cm.RCEndpoint{QPN: q.QPN(), PSN: myPSN, GID: gid,
		Region: cm.Region{Addr: m.Addr(), RKey: m.RKey(), Len: uint64(len(buf))}}) // cm.RCEndpoint
	if err != nil {
		return err
	}
	if peer.Region.Len < uint64(len(buf)) {
		return fmt.Errorf("the peer offers %d bytes, want %d", peer.Region.Len, len(buf))
	}
	err = q.Connect(myPSN, roce.Endpoint{QPN: peer.QPN, PSN: peer.PSN, GID: peer.GID}, nil) // RESET → INIT → RTR → RTS
	if err != nil {
		return err
	}
	err = q.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
		SGL:        []roce.SGE{{Addr: m.Addr(), Length: uint32(len(buf)), LKey: m.LKey()}},
		RemoteAddr: peer.Region.Addr, RKey: peer.Region.RKey})
	if err != nil {
		return err
	}
	wcs := make([]roce.WC, 1) // []roce.WC
	if _, err := cq.Wait(ctx, wcs); err != nil {
		return err
	}
	if wcs[0].Status != roce.WCSuccess {
		return fmt.Errorf("RDMA WRITE: %v", wcs[0].Status)
	}
	return nil
}
