package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

// ownExchange connects two xdproce devices through the RDMA CM with rping's
// parameters (one READ each way, ACK timeout 19 as the captured REQ), sends
// one SEND each way, disconnects, and returns the active side's frames.
func ownExchange(t *testing.T) []wire.Packet {
	t.Helper()
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	a, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}, Capture: &buf})
	if err != nil {
		t.Fatal(err)
	}
	b, err := roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.2")}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	co := roce.DefaultConnectOptions()
	co.Timeout = 19
	o := &roce.CMOptions{ResponderResources: 1, InitiatorDepth: 1, Connect: &co}
	l, err := b.ListenCM(7174, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mk := func(d *roce.Device) (*roce.QP, *roce.CQ, *roce.MR) {
		cq, err := d.CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		pd := d.AllocPD()
		mr, err := pd.RegMR(make([]byte, 64), roce.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		return q, cq, mr
	}
	qb, _, mrb := mk(b)
	accepted := make(chan error, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err == nil {
			_, err = r.Accept(ctx, qb, nil)
		}
		if err == nil { // a's SEND waits (RNR) until this receive is there
			err = qb.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{{Addr: mrb.Addr(), Length: 64, LKey: mrb.LKey()}}})
		}
		accepted <- err
	}()
	qa, cqa, mra := mk(a)
	k, err := a.DialCM(ctx, qa, netip.MustParseAddrPort("198.51.100.2:7174"), nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: []roce.SGE{{Addr: mra.Addr(), Length: 64, LKey: mra.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	var wcs [1]roce.WC
	if n, err := cqa.Wait(ctx, wcs[:]); n != 1 || err != nil || wcs[0].Status != roce.WCSuccess {
		t.Fatalf("send: %v %+v", err, wcs[0])
	}
	if err := k.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close()
	r, err := capture.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var out []wire.Packet
	var fr capture.Frame
	for {
		if err := r.Next(&fr); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		var p wire.Packet
		if err := p.Decode(bytes.Clone(fr.Data)); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
}

// TestOwnREQMatchesRxe compares xdproce's exchange with rping's under rxe:
// the QP1 framing of the first REQ (opcode, SE, P_Key, QPNs, Q_Key, UDP
// ports, TTL) byte for byte, the REQ field by field with the values that
// are random or per host (communication ID, CA GUID, QPN, PSN, addresses,
// CM source port and the flow label derived from it) taken from ours; the
// message sequence REQ, REP, RTU, DREQ, DREP; and Linux's PSN rule (the
// active side's RC requests start at the REP's starting PSN).
func TestOwnREQMatchesRxe(t *testing.T) {
	own := ownExchange(t)
	var ownMADs []rdmacm.Message
	var ownFrames []wire.Packet
	var firstRC *wire.Packet
	for i := range own {
		p := &own[i]
		if p.BTH.DestQPN == 1 || (p.BTH.Opcode == wire.UDSendOnly && p.DETH.SrcQPN == 1) {
			_, m, err := rdmacm.Decode(p.Payload)
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			ownMADs, ownFrames = append(ownMADs, m), append(ownFrames, *p)
		} else if info, _ := p.BTH.Opcode.Info(); info.Transport == wire.RC && info.Request && firstRC == nil {
			firstRC = p
		}
	}
	var names []string
	for _, m := range ownMADs {
		names = append(names, m.AttrID().String())
	}
	if diff := cmp.Diff([]string{"REQ", "REP", "RTU", "DREQ", "DREP"}, names); diff != "" {
		t.Fatalf("CM messages (-want +got):\n%s", diff)
	}
	// The rxe capture's first frame, the REQ.
	var rxeFrame wire.Packet
	eachFrame(t, "rdmacm_rping", func(i int, f *capture.Frame) {
		if i == 1 {
			if err := rxeFrame.Decode(bytes.Clone(f.Data)); err != nil {
				t.Fatal(err)
			}
		}
	})
	type framing struct {
		Opcode                wire.Opcode
		SE, MigReq, AckReq    bool
		Pad, TVer             uint8
		PKey                  uint16
		DestQPN, QKey, SrcQPN uint32
		SrcPort, DstPort      uint16
		TTL, TOS              uint8
		Len                   int
	}
	fr := func(p *wire.Packet) framing {
		return framing{p.BTH.Opcode, p.BTH.SE, p.BTH.MigReq, p.BTH.AckReq, p.BTH.PadCount, p.BTH.TVer, p.BTH.PKey,
			p.BTH.DestQPN, p.DETH.QKey, p.DETH.SrcQPN, p.SrcPort, p.DstPort, p.TTL, p.TOS, len(p.Payload)}
	}
	if diff := cmp.Diff(fr(&rxeFrame), fr(&ownFrames[0])); diff != "" {
		t.Errorf("QP1 framing of the REQ (-rxe +xdproce):\n%s", diff)
	}
	_, rm, err := rdmacm.Decode(rxeFrame.Payload)
	if err != nil {
		t.Fatal(err)
	}
	want, got := *rm.(*rdmacm.REQ), *ownMADs[0].(*rdmacm.REQ)
	want.LocalCommID, want.LocalCAGUID, want.LocalQPN, want.StartingPSN = got.LocalCommID, got.LocalCAGUID, got.LocalQPN, got.StartingPSN
	want.Primary.LocalGID, want.Primary.RemoteGID, want.Primary.FlowLabel = got.Primary.LocalGID, got.Primary.RemoteGID, got.Primary.FlowLabel
	want.PrivateData = got.PrivateData // the IP CM header: addresses and source port
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("REQ fields (-rxe +xdproce):\n%s", diff)
	}
	ip, _, err := rdmacm.ParseIPHeader(got.PrivateData[:])
	if err != nil || got.Primary.FlowLabel != (uint32(ip.SrcPort)*31+7174)&0xFFFFF {
		t.Errorf("flow label %#x for CM source port %d (%v)", got.Primary.FlowLabel, ip.SrcPort, err)
	}
	rep := ownMADs[1].(*rdmacm.REP)
	if firstRC == nil || firstRC.BTH.PSN != rep.StartingPSN {
		t.Errorf("first RC request %+v, want PSN %#x (the REP's starting PSN)", firstRC, rep.StartingPSN)
	}
}
