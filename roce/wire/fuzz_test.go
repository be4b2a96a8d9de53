package wire_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xdproce/xdproce/roce/wire"
)

func addSeeds(f *testing.F) {
	for _, c := range rxeFrames(f) {
		f.Add(c.data)
	}
	// One frame of each OOO opcode, IPv4 and IPv6, with the payload
	// lengths at the edges of the rules.
	rng := rand.New(rand.NewPCG(19, 20))
	for _, op := range oooOpcodes {
		info, _ := op.Info()
		for _, v6 := range []bool{false, true} {
			for _, n := range payloadLens(info) {
				_, frame := oooFrame(f, rng, op, v6, n)
				f.Add(frame)
			}
		}
	}
}

// FuzzDecode: Decode never panics; DecodeWritable gives the same Packet and
// error and leaves the frame as it was, as RecoverIPv4IDGuessInPlace does,
// which agrees with RecoverIPv4IDGuess; AcceptOOO changes only the verdict
// on OOO opcodes (checkWritable); a frame that decodes (with AcceptOOO)
// re-encodes to the same bytes (up to the end of the IP packet); a frame
// whose only fault is a checksum re-encodes to one that decodes cleanly.
func FuzzDecode(f *testing.F) {
	addSeeds(f)
	buf := make([]byte, 1<<16+64)
	f.Fuzz(func(t *testing.T, data []byte) {
		var p wire.Packet
		err := checkWritable(t, "fuzz input", data)
		if perr := p.DecodeWith(data, acceptVendor); perr != err {
			t.Fatalf("Decode: %v, then %v", err, perr)
		}
		// Recovering the IPv4 ID in place answers as the copying way and
		// leaves the frame as it was.
		inPlace := bytes.Clone(data)
		id1, ok1 := wire.RecoverIPv4IDGuess(data, 3)
		if id2, ok2 := wire.RecoverIPv4IDGuessInPlace(inPlace, 3); id1 != id2 || ok1 != ok2 || !bytes.Equal(inPlace, data) {
			t.Fatalf("RecoverIPv4IDGuess %#x %v, InPlace %#x %v (frame unchanged: %v)", id1, ok1, id2, ok2, bytes.Equal(inPlace, data))
		}
		if qpn, ok := wire.PeekDestQPN(data); err == nil && (!ok || qpn != p.BTH.DestQPN) {
			t.Fatalf("decoded QPN %#x, PeekDestQPN %#x %v", p.BTH.DestQPN, qpn, ok)
		}
		if _, cerr := wire.ComputeICRC(data); err == nil && cerr != nil {
			t.Fatalf("Decode ok but ComputeICRC: %v", cerr)
		}
		if err != nil && !errors.Is(err, wire.ErrBadICRC) && !errors.Is(err, wire.ErrBadChecksum) {
			return
		}
		icrc := p.ICRC
		q := p
		q.Payload = bytes.Clone(p.Payload)
		q.IPOptions = bytes.Clone(p.IPOptions)
		n, eerr := q.Encode(buf)
		if eerr != nil {
			t.Fatalf("decoded (%v) but Encode: %v\n%+v", err, eerr, p)
		}
		if n > len(data) {
			t.Fatalf("re-encoded %d bytes from a %d-byte frame", n, len(data))
		}
		if err == nil {
			if !bytes.Equal(buf[:n], data[:n]) {
				t.Fatalf("re-encoding differs\n got %x\nwant %x", buf[:n], data[:n])
			}
			if q.ICRC != icrc {
				t.Fatalf("ICRC %#x, decoded %#x", q.ICRC, icrc)
			}
		}
		var r wire.Packet
		if err := r.DecodeWith(buf[:n], acceptVendor); err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		// Moving the IPv4 ID keeps a right ICRC right and never panics.
		g := bytes.Clone(data)
		if icrcOK, ok := wire.ChangeIPv4ID(g, ^p.IPID); ok && icrcOK {
			if err := wire.VerifyICRC(g); err != nil {
				t.Fatalf("ICRC right for ID %#x but not after ChangeIPv4ID(%#x): %v", p.IPID, ^p.IPID, err)
			}
			if id, ok := wire.RecoverIPv4IDGuess(g, 7); !ok || id != ^p.IPID {
				t.Fatalf("RecoverIPv4IDGuess after ChangeIPv4ID(%#x): %#x, %v", ^p.IPID, id, ok)
			}
		}
	})
}

// FuzzGopacket: gopacket decoding never panics (a malformed packet gives an
// error layer); a BTH layer that decodes serialises back to the bytes it
// came from, and agrees with Packet.Decode.
func FuzzGopacket(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		l, ok := pkt.Layer(wire.LayerTypeBTH).(*wire.BTHLayer)
		if !ok {
			return
		}
		var bl wire.BTHLayer
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil {
			t.Fatal("BTH layer without UDP layer")
		}
		if err := bl.DecodeFromBytes(udp.Payload, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("NewPacket decoded a BTH layer, DecodeFromBytes: %v", err)
		}
		if bl.BTH != l.BTH || !bytes.Equal(bl.Payload, l.Payload) || bl.ICRC != l.ICRC {
			t.Fatal("NewPacket and DecodeFromBytes disagree")
		}
		sb := gopacket.NewSerializeBuffer()
		ls := []gopacket.SerializableLayer{&bl}
		if len(bl.Payload) > 0 {
			ls = append(ls, gopacket.Payload(bl.Payload))
		}
		if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{}, ls...); err != nil {
			t.Fatalf("SerializeLayers: %v", err)
		}
		if !bytes.Equal(sb.Bytes(), udp.Payload) {
			t.Fatalf("BTH layer serialises differently\n got %x\nwant %x", sb.Bytes(), udp.Payload)
		}
		var p wire.Packet
		if err := p.DecodeWith(data, acceptVendor); err == nil && (p.BTH != l.BTH || !bytes.Equal(p.Payload, l.Payload) ||
			p.XRH != l.XRH || p.XRR != l.XRR || p.XCS != l.XCS || p.XTPTarget != l.XTPTarget || p.XTPController != l.XTPController) {
			t.Fatal("Packet.Decode and the BTH layer disagree")
		}
	})
}
