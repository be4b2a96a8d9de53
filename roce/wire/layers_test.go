package wire_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xdproce/xdproce/roce/wire"
)

// wantLayers lists the layer types gopacket.NewPacket must produce for a
// decoded packet, built from the opcode table independently of the layer
// code: link, IP, UDP, BTH, one layer per extension header in wire order,
// payload if any.
func wantLayers(p *wire.Packet) []gopacket.LayerType {
	want := []gopacket.LayerType{layers.LayerTypeEthernet}
	if p.HasVLAN {
		want = append(want, layers.LayerTypeDot1Q)
	}
	if p.IPv6 {
		want = append(want, layers.LayerTypeIPv6)
	} else {
		want = append(want, layers.LayerTypeIPv4)
	}
	want = append(want, layers.LayerTypeUDP, wire.LayerTypeBTH)
	info, _ := p.BTH.Opcode.Info()
	for _, h := range []struct {
		bit wire.Headers
		lt  gopacket.LayerType
	}{
		{wire.HasDETH, wire.LayerTypeDETH},
		{wire.HasRETH, wire.LayerTypeRETH},
		{wire.HasAtomicETH, wire.LayerTypeAtomicETH},
		{wire.HasAETH, wire.LayerTypeAETH},
		{wire.HasAtomicAckETH, wire.LayerTypeAtomicAckETH},
		{wire.HasImmDt, wire.LayerTypeImmDt},
		{wire.HasIETH, wire.LayerTypeIETH},
		{wire.HasXRH, wire.LayerTypeXRH},
		{wire.HasXRR, wire.LayerTypeXRR},
		{wire.HasXCS, wire.LayerTypeXCS},
		{wire.HasXTPTarget, wire.LayerTypeXTPTarget},
		{wire.HasXTPController, wire.LayerTypeXTPController},
	} {
		if info.Headers&h.bit != 0 {
			want = append(want, h.lt)
		}
	}
	if len(p.Payload) > 0 {
		want = append(want, gopacket.LayerTypePayload)
	}
	return want
}

func layerTypes(pkt gopacket.Packet) []gopacket.LayerType {
	var got []gopacket.LayerType
	for _, l := range pkt.Layers() {
		got = append(got, l.LayerType())
	}
	return got
}

func TestGopacketCaptures(t *testing.T) {
	for _, f := range rxeFrames(t) {
		var p wire.Packet
		if err := p.Decode(f.data); err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		pkt := gopacket.NewPacket(f.data, layers.LayerTypeEthernet, gopacket.Default)
		if el := pkt.ErrorLayer(); el != nil {
			t.Errorf("%v: error layer: %v", f, el.Error())
			continue
		}
		if diff := cmp.Diff(wantLayers(&p), layerTypes(pkt)); diff != "" {
			t.Errorf("%v: layers (-want +got):\n%s", f, diff)
		}
		bth := pkt.Layer(wire.LayerTypeBTH).(*wire.BTHLayer)
		if bth.BTH != p.BTH || bth.RETH != p.RETH || bth.AETH != p.AETH || bth.Atomic != p.Atomic ||
			bth.AtomicAck != p.AtomicAck || bth.DETH != p.DETH || bth.ImmDt != p.ImmDt || bth.ICRC != p.ICRC {
			t.Errorf("%v: BTH layer %+v disagrees with Decode %+v", f, bth, p)
		}
		if !bytes.Equal(bth.Payload, p.Payload) {
			t.Errorf("%v: BTH layer payload differs", f)
		}
		if l, ok := pkt.Layer(wire.LayerTypeRETH).(*wire.RETHLayer); ok && l.RETH != p.RETH {
			t.Errorf("%v: RETH layer %+v, want %+v", f, l.RETH, p.RETH)
		}
		if l, ok := pkt.Layer(wire.LayerTypeAETH).(*wire.AETHLayer); ok && l.AETH != p.AETH {
			t.Errorf("%v: AETH layer %+v, want %+v", f, l.AETH, p.AETH)
		}
		if l, ok := pkt.Layer(wire.LayerTypeAtomicETH).(*wire.AtomicETHLayer); ok && l.AtomicETH != p.Atomic {
			t.Errorf("%v: AtomicETH layer %+v, want %+v", f, l.AtomicETH, p.Atomic)
		}
		if l, ok := pkt.Layer(wire.LayerTypeAtomicAckETH).(*wire.AtomicAckETHLayer); ok && l.AtomicAckETH != p.AtomicAck {
			t.Errorf("%v: AtomicAckETH layer %+v, want %+v", f, l.AtomicAckETH, p.AtomicAck)
		}
		if l, ok := pkt.Layer(wire.LayerTypeDETH).(*wire.DETHLayer); ok && l.DETH != p.DETH {
			t.Errorf("%v: DETH layer %+v, want %+v", f, l.DETH, p.DETH)
		}
		if l, ok := pkt.Layer(wire.LayerTypeImmDt).(*wire.ImmDtLayer); ok && l.Imm != p.ImmDt {
			t.Errorf("%v: ImmDt layer %#x, want %#x", f, l.Imm, p.ImmDt)
		}
		if app := pkt.ApplicationLayer(); len(p.Payload) > 0 && (app == nil || !bytes.Equal(app.Payload(), p.Payload)) {
			t.Errorf("%v: application layer does not hold the payload", f)
		}
		if err := wire.VerifyICRC(pkt.Data()); err != nil {
			t.Errorf("%v: VerifyICRC(packet.Data()): %v", f, err)
		}

		// SerializePacket writes every layer once and reproduces the frame.
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializePacket(buf, gopacket.SerializeOptions{}, pkt); err != nil {
			t.Errorf("%v: SerializePacket: %v", f, err)
		} else if !bytes.Equal(buf.Bytes(), f.data) {
			t.Errorf("%v: SerializePacket differs\n got %x\nwant %x", f, buf.Bytes(), f.data)
		}
	}
}

// TestGopacketSerializeFix builds frames from layers with FixLengths and
// ComputeChecksums and a zero ICRC, fixes the ICRC with SetICRC and checks
// the result against the captured frame.
func TestGopacketSerializeFix(t *testing.T) {
	for _, f := range rxeFrames(t) {
		pkt := gopacket.NewPacket(f.data, layers.LayerTypeEthernet, gopacket.Default)
		eth := *pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		ip := *pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp := *pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		bth := *pkt.Layer(wire.LayerTypeBTH).(*wire.BTHLayer)
		bth.SeparateExtensions = false // one self-contained layer
		bth.ICRC = 0
		bth.PadCount = 3 // wrong on purpose: FixLengths recomputes it
		ip.Length, ip.Checksum, udp.Length = 0, 0, 0
		if err := udp.SetNetworkLayerForChecksum(&ip); err != nil {
			t.Fatal(err)
		}
		ls := []gopacket.SerializableLayer{&eth, &ip, &udp, &bth}
		if len(bth.Payload) > 0 {
			ls = append(ls, gopacket.Payload(bytes.Clone(bth.Payload)))
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		out := buf.Bytes()
		// gopacket computes a UDP checksum (over the zero ICRC slot); rxe
		// sends 0 and the host peer's kernel socket a real one. The ICRC
		// masks the field, so SetICRC below must give the captured ICRC
		// whatever gopacket wrote there; then take the captured value.
		if err := wire.VerifyICRC(out); !errors.Is(err, wire.ErrBadICRC) {
			t.Fatalf("%v: VerifyICRC before SetICRC = %v, want ErrBadICRC", f, err)
		}
		if err := wire.SetICRC(out); err != nil {
			t.Fatalf("%v: SetICRC: %v", f, err)
		}
		checkSerialized(t, f, out)
	}
}

func checkSerialized(t *testing.T, f capturedFrame, out []byte) {
	t.Helper()
	copy(out[14+20+6:14+20+8], f.data[14+20+6:14+20+8])
	if !bytes.Equal(out, f.data) {
		t.Errorf("%v: serialised frame differs\n got %x\nwant %x", f, out, f.data)
	}
}

func TestDecodingLayerParser(t *testing.T) {
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		udp     layers.UDP
		bth     wire.BTHLayer
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &udp, &bth, &payload)
	var decoded []gopacket.LayerType
	for _, f := range rxeFrames(t) {
		if err := parser.DecodeLayers(f.data, &decoded); err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		var p wire.Packet
		if err := p.Decode(f.data); err != nil {
			t.Fatal(err)
		}
		want := []gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeUDP, wire.LayerTypeBTH}
		if len(p.Payload) > 0 {
			want = append(want, gopacket.LayerTypePayload)
		}
		if diff := cmp.Diff(want, decoded); diff != "" {
			t.Errorf("%v: decoded (-want +got):\n%s", f, diff)
		}
		if bth.BTH != p.BTH || bth.AETH != p.AETH || bth.RETH != p.RETH || bth.DETH != p.DETH || bth.ICRC != p.ICRC {
			t.Errorf("%v: BTH layer %+v, want %+v", f, bth, p)
		}
		if len(p.Payload) > 0 && !bytes.Equal(payload, p.Payload) {
			t.Errorf("%v: payload layer differs", f)
		}
	}
}

func TestGopacketMalformed(t *testing.T) {
	frames := rxeFrames(t)
	f := frames[0].data
	var p wire.Packet
	if err := p.Decode(f); err != nil {
		t.Fatal(err)
	}
	udpOff := 14 + 20
	cases := map[string][]byte{
		"truncated BTH": f[:udpOff+8+6],
		"bad opcode":    func() []byte { b := bytes.Clone(f); b[udpOff+8] = 0x15; return b }(),
		"bad TVer":      func() []byte { b := bytes.Clone(f); b[udpOff+8+1] |= 1; return b }(),
	}
	for name, frame := range cases {
		pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		if pkt.ErrorLayer() == nil {
			t.Errorf("%s: no error layer; layers %v", name, layerTypes(pkt))
		}
		if pkt.Layer(wire.LayerTypeBTH) != nil {
			t.Errorf("%s: BTH layer present", name)
		}
	}
}

func TestBTHLayerZeroAllocs(t *testing.T) {
	var l wire.BTHLayer
	frames := rxeFrames(t)
	for _, f := range frames[:20] {
		data := f.data[14+20+8:]
		if a := testing.AllocsPerRun(20, func() {
			if err := l.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%v: BTHLayer.DecodeFromBytes allocates %v times", f, a)
		}
	}
}
