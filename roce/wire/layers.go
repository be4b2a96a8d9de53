package wire

import (
	"encoding/binary"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// BTHLayer is the gopacket layer of the RoCEv2 transport: it decodes a UDP
// payload whole (BTH, the extension headers of the opcode, payload, pad,
// ICRC), because which headers follow the BTH depends on the opcode and a
// gopacket layer of its own could not know. Contents is the BTH and the
// extension headers, Payload the RDMA payload; the pad and the ICRC are in
// Trailer.
//
// Under a DecodingLayerParser the extension headers are only fields of this
// layer and NextLayerType is gopacket.LayerTypePayload (or LayerTypeZero when
// the packet has no payload). gopacket.NewPacket additionally adds one layer
// per extension header (RETHLayer, AETHLayer, ...) after this one, and sets
// SeparateExtensions so that gopacket.SerializePacket writes each header once.
//
// The layer does not verify the ICRC: it covers the IP header, which a layer
// does not see. Use VerifyICRC(packet.Data()).
type BTHLayer struct {
	layers.BaseLayer
	BTH
	RETH      RETH
	AETH      AETH
	Atomic    AtomicETH
	AtomicAck AtomicAckETH
	DETH      DETH
	ImmDt     uint32
	IETH      uint32
	ICRC      uint32 // as found; SerializeTo writes it as is (see SetICRC)
	Trailer   []byte // pad and ICRC
	// SeparateExtensions makes SerializeTo write only the BTH and leave the
	// extension headers to the extension layers serialised after it (the
	// layout gopacket.NewPacket produces).
	SeparateExtensions bool

	// The OOO headers (Transport OOO opcodes only, docs/ooo-wire.md).
	XRH                      XRH
	XRR                      XRR
	XCS                      XCS
	XTPTarget, XTPController XTP
}

var (
	errLayerExt     = newErr("serialize bth", "fewer bytes after the BTH than the opcode's extension headers", ErrBadLength)
	errLayerField   = newErr("serialize bth", "field out of range", ErrBadField)
	errLayerOpcode  = newErr("serialize bth", "opcode unknown", ErrUnknownOpcode)
	errExtLayerData = newErr("decode extension header", "data shorter than the header", ErrTruncated)
)

// LayerType returns LayerTypeBTH.
func (l *BTHLayer) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode returns LayerTypeBTH.
func (l *BTHLayer) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// NextLayerType returns gopacket.LayerTypePayload, or gopacket.LayerTypeZero
// when there is no payload.
func (l *BTHLayer) NextLayerType() gopacket.LayerType { return payloadType(l.Payload) }

func payloadType(b []byte) gopacket.LayerType {
	if len(b) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes decodes a UDP payload: BTH through ICRC, with the checks of
// Packet.Decode that need no IP header (TVer, opcode, lengths, pad, payload
// rules). It accepts the OOO opcodes (a layer is for looking at packets, not
// for a receiver that must refuse them; see AcceptOOO). It resets every
// field, aliases data and does not allocate.
func (l *BTHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	var p Packet
	*l = BTHLayer{}
	err := p.decodeTransport(data, AcceptOOO|AcceptSR)
	if err != nil {
		if err == errBTHShort || err == errExtShort {
			df.SetTruncated()
		}
		return err
	}
	hl := opTable[p.BTH.Opcode].HdrLen
	*l = BTHLayer{
		BaseLayer: layers.BaseLayer{Contents: data[:hl:hl], Payload: p.Payload},
		BTH:       p.BTH, RETH: p.RETH, AETH: p.AETH, Atomic: p.Atomic, AtomicAck: p.AtomicAck, DETH: p.DETH,
		ImmDt: p.ImmDt, IETH: p.IETH, ICRC: p.ICRC,
		XRH: p.XRH, XRR: p.XRR, XCS: p.XCS, XTPTarget: p.XTPTarget, XTPController: p.XTPController,
		Trailer: data[hl+len(p.Payload):],
	}
	return nil
}

// Info returns the opcode table entry of the layer's opcode.
func (l *BTHLayer) Info() (OpInfo, bool) { return l.Opcode.Info() }

// SerializeTo prepends the BTH (and, unless SeparateExtensions, the
// extension headers of the opcode from the layer's fields) and appends the
// pad and the ICRC. With opts.FixLengths the pad count is computed;
// otherwise PadCount is written as given (the pad appended is always the one
// the payload needs). The ICRC is written as l.ICRC: it covers the IP and
// UDP headers, which are serialised after this layer, so call SetICRC on the
// finished frame. Payload length rules are not enforced, so malformed
// packets can be built for tests.
func (l *BTHLayer) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	info := &opTable[l.Opcode]
	if info.Name == "" {
		return errLayerOpcode
	}
	if !l.BTH.valid() || l.AETH.MSN > PSNMask || l.DETH.SrcQPN > PSNMask ||
		l.XTPTarget.QPN > PSNMask || l.XTPController.QPN > PSNMask || l.XCS.Resv > PSNMask {
		return errLayerField
	}
	n := len(b.Bytes())
	ext := info.HdrLen - BTHLen
	if l.SeparateExtensions {
		n -= ext
		if n < 0 {
			return errLayerExt
		}
	}
	pad := (-n) & 3
	tail, err := b.AppendBytes(pad + ICRCLen)
	if err != nil {
		return err
	}
	for i := range pad {
		tail[i] = 0
	}
	binary.LittleEndian.PutUint32(tail[pad:], l.ICRC)
	if !l.SeparateExtensions && ext > 0 {
		h, err := b.PrependBytes(ext)
		if err != nil {
			return err
		}
		p := Packet{RETH: l.RETH, AETH: l.AETH, Atomic: l.Atomic, AtomicAck: l.AtomicAck, DETH: l.DETH,
			ImmDt: l.ImmDt, IETH: l.IETH,
			XRH: l.XRH, XRR: l.XRR, XCS: l.XCS, XTPTarget: l.XTPTarget, XTPController: l.XTPController}
		p.encodeExt(info.Headers, h)
	}
	h, err := b.PrependBytes(BTHLen)
	if err != nil {
		return err
	}
	bth := l.BTH
	if opts.FixLengths {
		bth.PadCount = uint8(pad)
		l.PadCount = uint8(pad)
	}
	bth.encode(h)
	return nil
}

// decodeBTH is the gopacket.Decoder of LayerTypeBTH: the BTH layer, then one
// layer per extension header, then the payload.
func decodeBTH(data []byte, pb gopacket.PacketBuilder) error {
	l := &BTHLayer{}
	if err := l.DecodeFromBytes(data, pb); err != nil {
		return err
	}
	l.SeparateExtensions = true
	pb.AddLayer(l)
	h := opTable[l.Opcode].Headers
	rest := data[BTHLen : len(l.Contents)+len(l.Payload)]
	next := func(size int) (contents, payload []byte) {
		contents, payload = rest[:size:size], rest[size:]
		rest = payload
		return
	}
	type ext struct {
		bit   Headers
		typ   gopacket.LayerType
		size  int
		layer func(c, p []byte) gopacket.Layer
	}
	for _, e := range [...]ext{
		{HasDETH, LayerTypeDETH, DETHLen, func(c, p []byte) gopacket.Layer {
			x := &DETHLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.DETH.decode(c)
			return x
		}},
		{HasRETH, LayerTypeRETH, RETHLen, func(c, p []byte) gopacket.Layer {
			x := &RETHLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.RETH.decode(c)
			return x
		}},
		{HasAtomicETH, LayerTypeAtomicETH, AtomicETHLen, func(c, p []byte) gopacket.Layer {
			x := &AtomicETHLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.AtomicETH.decode(c)
			return x
		}},
		{HasAETH, LayerTypeAETH, AETHLen, func(c, p []byte) gopacket.Layer {
			x := &AETHLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.AETH.decode(c)
			return x
		}},
		{HasAtomicAckETH, LayerTypeAtomicAckETH, AtomicAckETHLen, func(c, p []byte) gopacket.Layer {
			x := &AtomicAckETHLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.AtomicAckETH.decode(c)
			return x
		}},
		{HasImmDt, LayerTypeImmDt, ImmDtLen, func(c, p []byte) gopacket.Layer {
			return &ImmDtLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}, Imm: decodeU32(c)}
		}},
		{HasIETH, LayerTypeIETH, IETHLen, func(c, p []byte) gopacket.Layer {
			return &IETHLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}, RKey: decodeU32(c)}
		}},
		{HasXRH, LayerTypeXRH, XRHLen, func(c, p []byte) gopacket.Layer {
			x := &XRHLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.XRH.decode(c)
			return x
		}},
		{HasXRR, LayerTypeXRR, XRRLen, func(c, p []byte) gopacket.Layer {
			x := &XRRLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.XRR.decode(c)
			return x
		}},
		{HasXCS, LayerTypeXCS, XCSLen, func(c, p []byte) gopacket.Layer {
			x := &XCSLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.XCS.decode(c)
			return x
		}},
		{HasXTPTarget, LayerTypeXTPTarget, XTPLen, func(c, p []byte) gopacket.Layer {
			x := &XTPTargetLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.XTP.decode(c)
			return x
		}},
		{HasXTPController, LayerTypeXTPController, XTPLen, func(c, p []byte) gopacket.Layer {
			x := &XTPControllerLayer{BaseLayer: layers.BaseLayer{Contents: c, Payload: p}}
			x.XTP.decode(c)
			return x
		}},
	} {
		if h&e.bit != 0 {
			pb.AddLayer(e.layer(next(e.size)))
		}
	}
	if len(l.Payload) == 0 {
		return nil
	}
	return pb.NextDecoder(gopacket.LayerTypePayload)
}

// extLayer is what the extension header layers have in common.
type extLayer interface {
	gopacket.DecodingLayer
	gopacket.Layer
}

// decodeExtLayer decodes one extension header on its own (when a decoder is
// asked for it by layer type); what follows is treated as payload.
func decodeExtLayer[T any, PT interface {
	*T
	extLayer
}](data []byte, pb gopacket.PacketBuilder) error {
	l := PT(new(T))
	if err := l.DecodeFromBytes(data, pb); err != nil {
		return err
	}
	pb.AddLayer(l)
	return pb.NextDecoder(l.NextLayerType())
}

// The extension header layers. On their own (DecodeFromBytes) a layer cannot
// know which header follows it, so NextLayerType is gopacket.LayerTypePayload
// for whatever follows; gopacket.NewPacket builds them from the BTH layer, in
// wire order, and the payload of each is what follows it up to the pad.
// SerializeTo prepends the header; serialise them after a BTHLayer with
// SeparateExtensions set, or alone.

// RETHLayer is the RETH as a gopacket layer.
type RETHLayer struct {
	layers.BaseLayer
	RETH
}

// AETHLayer is the AETH as a gopacket layer.
type AETHLayer struct {
	layers.BaseLayer
	AETH
}

// AtomicETHLayer is the AtomicETH as a gopacket layer.
type AtomicETHLayer struct {
	layers.BaseLayer
	AtomicETH
}

// AtomicAckETHLayer is the AtomicAckETH as a gopacket layer.
type AtomicAckETHLayer struct {
	layers.BaseLayer
	AtomicAckETH
}

// DETHLayer is the DETH as a gopacket layer.
type DETHLayer struct {
	layers.BaseLayer
	DETH
}

// ImmDtLayer is the immediate data as a gopacket layer.
type ImmDtLayer struct {
	layers.BaseLayer
	Imm uint32
}

// IETHLayer is the IETH (the R_Key to invalidate) as a gopacket layer.
type IETHLayer struct {
	layers.BaseLayer
	RKey uint32
}

func (l *RETHLayer) LayerType() gopacket.LayerType         { return LayerTypeRETH }
func (l *AETHLayer) LayerType() gopacket.LayerType         { return LayerTypeAETH }
func (l *AtomicETHLayer) LayerType() gopacket.LayerType    { return LayerTypeAtomicETH }
func (l *AtomicAckETHLayer) LayerType() gopacket.LayerType { return LayerTypeAtomicAckETH }
func (l *DETHLayer) LayerType() gopacket.LayerType         { return LayerTypeDETH }
func (l *ImmDtLayer) LayerType() gopacket.LayerType        { return LayerTypeImmDt }
func (l *IETHLayer) LayerType() gopacket.LayerType         { return LayerTypeIETH }

func (l *RETHLayer) CanDecode() gopacket.LayerClass         { return LayerTypeRETH }
func (l *AETHLayer) CanDecode() gopacket.LayerClass         { return LayerTypeAETH }
func (l *AtomicETHLayer) CanDecode() gopacket.LayerClass    { return LayerTypeAtomicETH }
func (l *AtomicAckETHLayer) CanDecode() gopacket.LayerClass { return LayerTypeAtomicAckETH }
func (l *DETHLayer) CanDecode() gopacket.LayerClass         { return LayerTypeDETH }
func (l *ImmDtLayer) CanDecode() gopacket.LayerClass        { return LayerTypeImmDt }
func (l *IETHLayer) CanDecode() gopacket.LayerClass         { return LayerTypeIETH }

func (l *RETHLayer) NextLayerType() gopacket.LayerType         { return payloadType(l.Payload) }
func (l *AETHLayer) NextLayerType() gopacket.LayerType         { return payloadType(l.Payload) }
func (l *AtomicETHLayer) NextLayerType() gopacket.LayerType    { return payloadType(l.Payload) }
func (l *AtomicAckETHLayer) NextLayerType() gopacket.LayerType { return payloadType(l.Payload) }
func (l *DETHLayer) NextLayerType() gopacket.LayerType         { return payloadType(l.Payload) }
func (l *ImmDtLayer) NextLayerType() gopacket.LayerType        { return payloadType(l.Payload) }
func (l *IETHLayer) NextLayerType() gopacket.LayerType         { return payloadType(l.Payload) }

// splitExt resets base to data[:n] | data[n:], or reports truncation.
func splitExt(base *layers.BaseLayer, data []byte, n int, df gopacket.DecodeFeedback) bool {
	if len(data) < n {
		*base = layers.BaseLayer{}
		df.SetTruncated()
		return false
	}
	*base = layers.BaseLayer{Contents: data[:n:n], Payload: data[n:]}
	return true
}

func (l *RETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.RETH = RETH{}
	if !splitExt(&l.BaseLayer, data, RETHLen, df) {
		return errExtLayerData
	}
	l.RETH.decode(data)
	return nil
}

func (l *AETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.AETH = AETH{}
	if !splitExt(&l.BaseLayer, data, AETHLen, df) {
		return errExtLayerData
	}
	l.AETH.decode(data)
	return nil
}

func (l *AtomicETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.AtomicETH = AtomicETH{}
	if !splitExt(&l.BaseLayer, data, AtomicETHLen, df) {
		return errExtLayerData
	}
	l.AtomicETH.decode(data)
	return nil
}

func (l *AtomicAckETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.AtomicAckETH = AtomicAckETH{}
	if !splitExt(&l.BaseLayer, data, AtomicAckETHLen, df) {
		return errExtLayerData
	}
	l.AtomicAckETH.decode(data)
	return nil
}

func (l *DETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.DETH = DETH{}
	if !splitExt(&l.BaseLayer, data, DETHLen, df) {
		return errExtLayerData
	}
	l.DETH.decode(data)
	return nil
}

func (l *ImmDtLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.Imm = 0
	if !splitExt(&l.BaseLayer, data, ImmDtLen, df) {
		return errExtLayerData
	}
	l.Imm = decodeU32(data)
	return nil
}

func (l *IETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.RKey = 0
	if !splitExt(&l.BaseLayer, data, IETHLen, df) {
		return errExtLayerData
	}
	l.RKey = decodeU32(data)
	return nil
}

func (l *RETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(RETHLen)
	if err == nil {
		l.RETH.encode(h)
	}
	return err
}

func (l *AETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	if l.MSN > PSNMask {
		return errLayerField
	}
	h, err := b.PrependBytes(AETHLen)
	if err == nil {
		l.AETH.encode(h)
	}
	return err
}

func (l *AtomicETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(AtomicETHLen)
	if err == nil {
		l.AtomicETH.encode(h)
	}
	return err
}

func (l *AtomicAckETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(AtomicAckETHLen)
	if err == nil {
		l.AtomicAckETH.encode(h)
	}
	return err
}

func (l *DETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	if l.SrcQPN > PSNMask {
		return errLayerField
	}
	h, err := b.PrependBytes(DETHLen)
	if err == nil {
		l.DETH.encode(h)
	}
	return err
}

func (l *ImmDtLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(ImmDtLen)
	if err == nil {
		encodeU32(h, l.Imm)
	}
	return err
}

func (l *IETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(IETHLen)
	if err == nil {
		encodeU32(h, l.RKey)
	}
	return err
}

// Compile-time checks.
var (
	_ gopacket.DecodingLayer     = (*BTHLayer)(nil)
	_ gopacket.SerializableLayer = (*BTHLayer)(nil)
	_ extLayer                   = (*RETHLayer)(nil)
	_ extLayer                   = (*AETHLayer)(nil)
	_ extLayer                   = (*AtomicETHLayer)(nil)
	_ extLayer                   = (*AtomicAckETHLayer)(nil)
	_ extLayer                   = (*DETHLayer)(nil)
	_ extLayer                   = (*ImmDtLayer)(nil)
	_ extLayer                   = (*IETHLayer)(nil)
	_ gopacket.SerializableLayer = (*RETHLayer)(nil)
	_ gopacket.SerializableLayer = (*AETHLayer)(nil)
	_ gopacket.SerializableLayer = (*AtomicETHLayer)(nil)
	_ gopacket.SerializableLayer = (*AtomicAckETHLayer)(nil)
	_ gopacket.SerializableLayer = (*DETHLayer)(nil)
	_ gopacket.SerializableLayer = (*ImmDtLayer)(nil)
	_ gopacket.SerializableLayer = (*IETHLayer)(nil)
)
