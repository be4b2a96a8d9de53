// Command pipe-rdma connects two RoCE devices through an in-memory link
// (link/pipe) in one process and moves data between them with RDMA WRITE,
// RDMA READ and SEND, checking every byte. It needs no privileges:
//
//	go run ./examples/pipe-rdma
package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// end is one side of the connection.
type end struct {
	dev *roce.Device
	cq  *roce.CQ
	qp  *roce.QP
	buf []byte
	mr  *roce.MR
}

func open(l *pipe.Link, ip string) (*end, error) {
	dev, err := roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr(ip)}})
	if err != nil {
		return nil, err
	}
	e := &end{dev: dev, buf: make([]byte, 1<<20)}
	if e.cq, err = dev.CreateCQ(64); err != nil {
		return nil, err
	}
	pd := dev.AllocPD()
	if e.mr, err = pd.RegMR(e.buf, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead); err != nil {
		return nil, err
	}
	if e.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: e.cq, RecvCQ: e.cq}); err != nil {
		return nil, err
	}
	return e, nil
}

// endpoint is what the peer needs to connect: QPN, first PSN, GID.
func (e *end) endpoint(psn uint32) roce.Endpoint {
	gid, _ := e.dev.GID(1) // index 1: the IPv4 GID, as on rxe
	return roce.Endpoint{QPN: e.qp.QPN(), PSN: psn, GID: gid}
}

func (e *end) sge(off, n int) roce.SGE {
	return roce.SGE{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

// wait returns the next completion, failing on an error status.
func (e *end) wait() (roce.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wcs [1]roce.WC
	if _, err := e.cq.Wait(ctx, wcs[:]); err != nil {
		return roce.WC{}, err
	}
	if wcs[0].Status != roce.WCSuccess {
		return wcs[0], fmt.Errorf("work request %d: %v", wcs[0].ID, wcs[0].Status)
	}
	return wcs[0], nil
}

func run() error {
	la, lb, err := pipe.New(pipe.Config{MTU: 1500})
	if err != nil {
		return err
	}
	a, err := open(la, "198.51.100.1")
	if err != nil {
		return err
	}
	defer a.dev.Close()
	b, err := open(lb, "198.51.100.2")
	if err != nil {
		return err
	}
	defer b.dev.Close()

	// Exchange endpoints (here in memory; across hosts, over TCP: package cm).
	if err := a.qp.Connect(100, b.endpoint(200), nil); err != nil {
		return err
	}
	if err := b.qp.Connect(200, a.endpoint(100), nil); err != nil {
		return err
	}
	fmt.Printf("connected QP %#x ↔ QP %#x over %s, path MTU %d\n", a.qp.QPN(), b.qp.QPN(), a.dev.LinkName(), a.dev.PathMTU().Bytes())

	// RDMA WRITE 100 KB from a into b's memory.
	msg := bytes.Repeat([]byte("xdproce "), 12500)
	copy(a.buf, msg)
	if err := a.qp.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
		SGL: []roce.SGE{a.sge(0, len(msg))}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		return err
	}
	if _, err := a.wait(); err != nil {
		return err
	}
	fmt.Printf("RDMA WRITE of %d bytes: data landed: %v\n", len(msg), bytes.Equal(b.buf[:len(msg)], msg))

	// RDMA READ it back into another part of a's memory.
	if err := a.qp.PostSend(roce.SendWR{ID: 2, Opcode: roce.WRRDMARead, Flags: roce.Signaled,
		SGL: []roce.SGE{a.sge(500000, len(msg))}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		return err
	}
	wc, err := a.wait()
	if err != nil {
		return err
	}
	fmt.Printf("RDMA READ of %d bytes: equal: %v\n", wc.ByteLen, bytes.Equal(a.buf[500000:500000+len(msg)], msg))

	// SEND with immediate data into a receive b posted.
	if err := b.qp.PostRecv(roce.RecvWR{ID: 3, SGL: []roce.SGE{b.sge(800000, 4096)}}); err != nil {
		return err
	}
	copy(a.buf, "hello, RDMA")
	if err := a.qp.PostSend(roce.SendWR{ID: 4, Opcode: roce.WRSendImm, Imm: 42, Flags: roce.Signaled,
		SGL: []roce.SGE{a.sge(0, 11)}}); err != nil {
		return err
	}
	if _, err := a.wait(); err != nil {
		return err
	}
	wc, err = b.wait()
	if err != nil {
		return err
	}
	fmt.Printf("SEND: %q with immediate %d\n", b.buf[800000:800000+wc.ByteLen], wc.ImmData)
	return nil
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}
