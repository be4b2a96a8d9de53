package roce_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// TestPrivilegedCMLossyRelay (issue 19): through netlab's relay losing 5 %
// of the RoCE frames each way (MADs on QP1 and the RC traffic alike), 20
// RDMA CM connections between two namespaces each establish by the CM's
// retries (shortCM: 67 ms a try, 15 tries), carry a SEND each way whose
// data lands, and disconnect; afterwards neither CM agent tracks a
// connection. AF_XDP ends and UDP socket ends, each its own relay. The
// MAD resends and the MADs lost are logged.
func TestPrivilegedCMLossyRelay(t *testing.T) {
	netlab.Privileged(t)
	for _, link := range []roce.LinkKind{roce.LinkXSK, roce.LinkUDP} {
		t.Run(link.String(), func(t *testing.T) {
			topo := netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{Seed: 19, Loss: 0.05, Filter: isRoCEv4})
			p := &devPair{a: openIn(t, topo.A, roce.Options{Link: link}), b: openIn(t, topo.B, roce.Options{Link: link})}
			l, err := p.b.ListenCM(7174, &shortCM)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			const n = 20
			for i := range n {
				x, y, kx, ky := cmPairTo(t, p, l, topo.B.IPv4, []byte("lossy relay"), []byte("ok"))
				for _, d := range []struct{ from, to *side }{{x, y}, {y, x}} {
					fill(d.from.buf[:100], byte(i))
					if err := d.to.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{d.to.sge(1000, 100)}}); err != nil {
						t.Fatal(err)
					}
					if err := d.from.qp.PostSend(roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: []roce.SGE{d.from.sge(0, 100)}}); err != nil {
						t.Fatal(err)
					}
					if wc := waitWC(t, d.to.rcq); wc.Status != roce.WCSuccess || wc.ByteLen != 100 {
						t.Fatalf("connection %d: recv %+v", i, wc)
					}
					if wc := waitWC(t, d.from.scq); wc.Status != roce.WCSuccess {
						t.Fatalf("connection %d: send %+v", i, wc)
					}
					if !bytes.Equal(d.to.buf[1000:1100], d.from.buf[:100]) {
						t.Fatalf("connection %d: the SEND's data differ", i)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := kx.Disconnect(ctx)
				if err == nil {
					select {
					case <-ky.Done():
					case <-ctx.Done():
						err = ctx.Err()
					}
				}
				cancel()
				if err != nil {
					t.Fatalf("connection %d: disconnect: %v", i, err)
				}
			}
			sa, sb, rs := p.a.CMStats(), p.b.CMStats(), topo.Relay.Stats()
			t.Logf("%d connections through 5 %% loss: relay lost %d of %d frames; MADs sent %d, received %d (%d lost), resent after a timeout %d (a %d, b %d)",
				n, rs.Lost, rs.Received, sa.Sent+sb.Sent, sa.Received+sb.Received, int64(sa.Sent+sb.Sent)-int64(sa.Received+sb.Received),
				sa.Resent+sb.Resent, sa.Resent, sb.Resent)
			if sa.Conns+sb.Conns != 0 {
				t.Fatalf("CM agents still track %d and %d connections", sa.Conns, sb.Conns)
			}
			if rs.Lost == 0 {
				t.Fatalf("the relay lost nothing: %+v", rs)
			}
		})
	}
}

// isRoCEv4 selects IPv4 UDP frames to port 4791 (the relay impairs only
// those: ARP and the kernels' own chatter pass).
func isRoCEv4(f []byte) bool {
	return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 17 && binary.BigEndian.Uint16(f[36:]) == 4791
}
