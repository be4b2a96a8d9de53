package roce_test

import (
	"context"
	"fmt"

	"github.com/xdproce/xdproce/roce"
)

// writeToPeer copies buf[:4096] into a peer's memory with one RDMA WRITE over eth1. The
// peer's endpoint (QPN, first PSN, GID), buffer address and rkey come out of band (package cm).
func writeToPeer(ctx context.Context, buf []byte, myPSN uint32, peer roce.Endpoint, peerVA uint64, peerRKey uint32) error {
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
	if err := q.Connect(myPSN, peer, nil); err != nil { // RESET → INIT → RTR → RTS
		return err
	}
	err = q.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
		SGL: []roce.SGE{{Addr: m.Addr(), Length: 4096, LKey: m.LKey()}}, RemoteAddr: peerVA, RKey: peerRKey})
	if err != nil {
		return err
	}
	wcs := make([]roce.WC, 1)
	if _, err := cq.Wait(ctx, wcs); err != nil {
		return err
	}
	if wcs[0].Status != roce.WCSuccess {
		return fmt.Errorf("RDMA WRITE: %v", wcs[0].Status)
	}
	return nil
}
