//go:build linux

package udp_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce/wire"
)

// encode builds an RC SEND_ONLY frame from a to b with the wire encoder.
func encode(t testing.TB, src, dst netip.Addr, sport uint16, id uint16, tos, ttl uint8, payload []byte) []byte {
	t.Helper()
	p := wire.Packet{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		IPv6: src.Is6(), SrcIP: src, DstIP: dst,
		TOS: tos, TTL: ttl, IPID: id, IPFlags: wire.IPv4DontFragment,
		SrcPort: sport, DstPort: wire.UDPPort,
		BTH:     wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQPN: 0x11, AckReq: true, PSN: 0xc829ba},
		Payload: payload,
	}
	buf := make([]byte, p.FrameLen())
	n, err := p.Encode(buf)
	if err != nil {
		t.Fatalf("wire encode: %v", err)
	}
	if err := (&wire.Packet{}).Decode(buf[:n]); err != nil {
		t.Fatalf("the frame sent does not decode: %v", err)
	}
	return buf[:n]
}

// TestICRCSurvivesKernelHeaders sends frames the engine would build (IPv4 ID
// 0, source port = Props.SrcPort) through the kernel and checks that the
// frame rebuilt at the receiver decodes with a valid ICRC and the same
// fields; and that frames built otherwise (another IP ID, another source
// port) do not, which is why Props.SrcPort and ID 0 matter.
func TestICRCSurvivesKernelHeaders(t *testing.T) {
	payload := bytes.Repeat([]byte("rocev2!"), 37) // 259 bytes: pad 1
	for _, fam := range []struct {
		name     string
		pair     func(t *testing.T) (a, b *udp.Link)
		src, dst netip.Addr
	}{
		{"IPv4", func(t *testing.T) (a, b *udp.Link) { return pairSamePort(t, udp.Config{}) }, lo1, lo2},
		{"IPv6", func(t *testing.T) (a, b *udp.Link) { return pairPorts(t, lo6, lo6, udp.Config{}) }, lo6, lo6},
		{"DualStackIPv4", func(t *testing.T) (a, b *udp.Link) { return pairPorts(t, netip.Addr{}, lo2, udp.Config{MTU: 1500}) }, lo1, lo2},
	} {
		t.Run(fam.name, func(t *testing.T) {
			a, b := fam.pair(t)
			sport := a.Props().SrcPort
			v6 := fam.src.Is6()

			// What the engine sends: ID 0, our port. TOS and TTL are
			// masked by the ICRC, so odd values must not matter.
			sent := encode(t, fam.src, fam.dst, sport, 0, 0x28, 3, payload)
			if err := sendOne(t, a, sent); err != nil {
				t.Fatal(err)
			}
			got := recvOne(t, b)
			var p wire.Packet
			if err := p.Decode(got); err != nil {
				t.Fatalf("received frame: %v\n% x", err, got)
			}
			var q wire.Packet
			q.Decode(sent)
			if p.ICRC != q.ICRC || !bytes.Equal(p.Payload, payload) || p.BTH != q.BTH ||
				p.SrcIP != fam.src || p.DstIP != fam.dst || p.SrcPort != sport || p.DstPort != wire.UDPPort {
				t.Errorf("received %+v\nsent     %+v", p, q)
			}

			if v6 {
				return // no IP ID in IPv6
			}
			// A sender whose ICRC covers another IP ID (as rxe's does: it
			// counts): the kernel hides the received ID, and the link
			// recovers it from the ICRC, so the frame is whole again.
			before := b.Stats().RxIPIDRecovered
			if err := sendOne(t, a, encode(t, fam.src, fam.dst, sport, 0x1234, 0, 64, payload)); err != nil {
				t.Fatal(err)
			}
			if err := p.Decode(recvOne(t, b)); err != nil || p.IPID != 0x1234 {
				t.Errorf("frame encoded with IP ID 0x1234: %v, ID %#x; want a valid frame with ID 0x1234", err, p.IPID)
			}
			if got := b.Stats().RxIPIDRecovered - before; got != 1 {
				t.Errorf("RxIPIDRecovered grew by %d, want 1", got)
			}
			// The same with a corrupted payload byte: no ID explains it.
			bad := encode(t, fam.src, fam.dst, sport, 0x1234, 0, 64, payload)
			bad[len(bad)-6] ^= 0x5a
			if err := sendOne(t, a, bad); err != nil {
				t.Fatal(err)
			}
			if err := p.Decode(recvOne(t, b)); !errors.Is(err, wire.ErrBadICRC) {
				t.Errorf("corrupted frame: %v, want ErrBadICRC", err)
			}
			// A frame encoded with another source port than the socket's.
			if err := sendOne(t, a, encode(t, fam.src, fam.dst, 0xC000, 0, 0, 64, payload)); err != nil {
				t.Fatal(err)
			}
			if err := p.Decode(recvOne(t, b)); !errors.Is(err, wire.ErrBadICRC) {
				t.Errorf("frame encoded with source port 0xC000: %v, want ErrBadICRC", err)
			}
		})
	}
}
