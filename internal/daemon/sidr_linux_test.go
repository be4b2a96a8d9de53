package daemon

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// udSide is a UD queue pair in RESET with a CQ and a registered buffer.
func udSide(t *testing.T, d *roce.Device) *scriptSide {
	t.Helper()
	s := &scriptSide{dev: d, buf: make([]byte, 8192)}
	pd := d.AllocPD()
	var err error
	if s.cq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = pd.RegMR(s.buf, roce.LocalWrite); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.UD, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 16, MaxRecvWR: 16}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPrivilegedSIDR: UD through the RDMA CM with a daemon in the way. Two
// clients of the daemon listen on RDMA_PS_UDP ports (the daemon steers each
// SIDR_REQ by service ID and each SIDR_REP by request ID); a device across
// the veth resolves both, one client the other (same host) and the remote
// device, over IPv4 and IPv6, and a UD SEND to each reply's address handle
// lands in the accepting queue pair. A client cannot take the other's UDP
// port; a SIDR_REQ to a port nobody listens on, or to a client that has
// gone, is answered by the daemon with status unsupported.
func TestPrivilegedSIDR(t *testing.T) {
	netlab.Privileged(t)
	p := newDaemonPair(t)
	addrA := p.topo.A.IPv4
	listen := func(d *roce.Device, port uint16) *roce.SIDRListener {
		l, err := d.ListenSIDR(port)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	lx, ly, lz := listen(p.x, 7101), listen(p.y, 7102), listen(p.z, 7103)
	if _, err := p.y.ListenSIDR(7101); err == nil || !strings.Contains(err.Error(), "taken by client") {
		t.Fatalf("y listened on x's UDP port: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ls := map[*roce.Device]*roce.SIDRListener{p.x: lx, p.y: ly, p.z: lz}
	for i, tc := range p.crossings() {
		a, b := udSide(t, tc.from), udSide(t, tc.to)
		l := ls[tc.to]
		acc := make(chan error, 1)
		go func() {
			r, err := l.Accept(ctx)
			if err == nil {
				if !bytes.HasPrefix(r.PrivateData, []byte("ud hello")) {
					err = errors.New("request private data " + string(r.PrivateData))
				} else {
					err = r.Accept(b.qp, []byte("ud welcome"))
				}
			}
			acc <- err
		}()
		rep, err := tc.from.DialSIDR(ctx, netip.AddrPortFrom(tc.dst, l.Port()), []byte("ud hello"), &shortCM)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := <-acc; err != nil {
			t.Fatalf("%s: accept: %v", tc.name, err)
		}
		if rep.QPN != b.qp.QPN() || rep.QKey != roce.UDPQKey || !bytes.HasPrefix(rep.PrivateData, []byte("ud welcome")) {
			t.Fatalf("%s: reply QPN %#x Q_Key %#x data %q, want QPN %#x", tc.name, rep.QPN, rep.QKey, rep.PrivateData, b.qp.QPN())
		}
		if err := a.qp.Activate(roce.UDPQKey, 0); err != nil {
			t.Fatal(err)
		}
		msg := []byte("a datagram to the resolved queue pair " + string(rune('0'+i)))
		copy(a.buf, msg)
		if err := b.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{{Addr: b.mr.Addr() + 4096, Length: 4096, LKey: b.mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSendAH(roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.Signaled,
			SGL: []roce.SGE{{Addr: a.mr.Addr(), Length: uint32(len(msg)), LKey: a.mr.LKey()}}}, rep.AH); err != nil {
			t.Fatal(err)
		}
		if got := b.wait(t, 1); got[0].Status != roce.WCSuccess.String() || got[0].ByteLen != uint32(40+len(msg)) ||
			!bytes.Equal(b.buf[4096+40:4096+40+len(msg)], msg) {
			t.Fatalf("%s: receive %+v", tc.name, got[0])
		}
	}
	var se *roce.SIDRError
	if _, err := p.z.DialSIDR(ctx, netip.AddrPortFrom(addrA, 7109), nil, &shortCM); !errors.As(err, &se) || se.Status != roce.SIDRUnsupported {
		t.Fatalf("resolve a port nobody listens on: %v", err)
	}
	p.y.Close()
	for deadline := time.Now().Add(5 * time.Second); len(p.d.Stats().Clients) != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon still has y")
		}
	}
	if _, err := p.z.DialSIDR(ctx, netip.AddrPortFrom(addrA, 7102), nil, &shortCM); !errors.As(err, &se) || se.Status != roce.SIDRUnsupported {
		t.Fatalf("resolve the departed client's port: %v", err)
	}
	if st := p.d.Stats(); st.CMAnswered < 2 {
		t.Errorf("daemon stats %+v", st)
	}
}
