package wire

import (
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// The OOO headers as gopacket layers (docs/ooo-wire.md). They behave as the
// standard extension header layers of layers.go: gopacket.NewPacket builds
// them from the BTH layer in wire order; on their own NextLayerType is
// gopacket.LayerTypePayload for whatever follows; SerializeTo prepends the
// header.

// XRHLayer is the XRH as a gopacket layer.
type XRHLayer struct {
	layers.BaseLayer
	XRH
}

// XRRLayer is the XRR as a gopacket layer.
type XRRLayer struct {
	layers.BaseLayer
	XRR
}

// XCSLayer is the XCS as a gopacket layer.
type XCSLayer struct {
	layers.BaseLayer
	XCS
}

// XTPTargetLayer is the target XTP (the data sink of OOO_3P_READ_REQ) as a
// gopacket layer.
type XTPTargetLayer struct {
	layers.BaseLayer
	XTP
}

// XTPControllerLayer is the controller XTP (who gets the completion of a
// third-party operation) as a gopacket layer.
type XTPControllerLayer struct {
	layers.BaseLayer
	XTP
}

func (l *XRHLayer) LayerType() gopacket.LayerType           { return LayerTypeXRH }
func (l *XRRLayer) LayerType() gopacket.LayerType           { return LayerTypeXRR }
func (l *XCSLayer) LayerType() gopacket.LayerType           { return LayerTypeXCS }
func (l *XTPTargetLayer) LayerType() gopacket.LayerType     { return LayerTypeXTPTarget }
func (l *XTPControllerLayer) LayerType() gopacket.LayerType { return LayerTypeXTPController }

func (l *XRHLayer) CanDecode() gopacket.LayerClass           { return LayerTypeXRH }
func (l *XRRLayer) CanDecode() gopacket.LayerClass           { return LayerTypeXRR }
func (l *XCSLayer) CanDecode() gopacket.LayerClass           { return LayerTypeXCS }
func (l *XTPTargetLayer) CanDecode() gopacket.LayerClass     { return LayerTypeXTPTarget }
func (l *XTPControllerLayer) CanDecode() gopacket.LayerClass { return LayerTypeXTPController }

func (l *XRHLayer) NextLayerType() gopacket.LayerType           { return payloadType(l.Payload) }
func (l *XRRLayer) NextLayerType() gopacket.LayerType           { return payloadType(l.Payload) }
func (l *XCSLayer) NextLayerType() gopacket.LayerType           { return payloadType(l.Payload) }
func (l *XTPTargetLayer) NextLayerType() gopacket.LayerType     { return payloadType(l.Payload) }
func (l *XTPControllerLayer) NextLayerType() gopacket.LayerType { return payloadType(l.Payload) }

func (l *XRHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.XRH = XRH{}
	if !splitExt(&l.BaseLayer, data, XRHLen, df) {
		return errExtLayerData
	}
	l.XRH.decode(data)
	return nil
}

func (l *XRRLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.XRR = XRR{}
	if !splitExt(&l.BaseLayer, data, XRRLen, df) {
		return errExtLayerData
	}
	l.XRR.decode(data)
	return nil
}

func (l *XCSLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.XCS = XCS{}
	if !splitExt(&l.BaseLayer, data, XCSLen, df) {
		return errExtLayerData
	}
	l.XCS.decode(data)
	return nil
}

func (l *XTPTargetLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	return decodeXTPLayer(&l.BaseLayer, &l.XTP, data, df)
}

func (l *XTPControllerLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	return decodeXTPLayer(&l.BaseLayer, &l.XTP, data, df)
}

func decodeXTPLayer(base *layers.BaseLayer, x *XTP, data []byte, df gopacket.DecodeFeedback) error {
	*x = XTP{}
	if !splitExt(base, data, XTPLen, df) {
		return errExtLayerData
	}
	x.decode(data)
	return nil
}

func (l *XRHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(XRHLen)
	if err == nil {
		l.XRH.encode(h)
	}
	return err
}

func (l *XRRLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(XRRLen)
	if err == nil {
		l.XRR.encode(h)
	}
	return err
}

func (l *XCSLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	if l.Resv > PSNMask {
		return errLayerField
	}
	h, err := b.PrependBytes(XCSLen)
	if err == nil {
		l.XCS.encode(h)
	}
	return err
}

func (l *XTPTargetLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeXTP(b, &l.XTP)
}

func (l *XTPControllerLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeXTP(b, &l.XTP)
}

func serializeXTP(b gopacket.SerializeBuffer, x *XTP) error {
	if x.QPN > PSNMask {
		return errLayerField
	}
	h, err := b.PrependBytes(XTPLen)
	if err == nil {
		x.encode(h)
	}
	return err
}

// Compile-time checks.
var (
	_ extLayer                   = (*XRHLayer)(nil)
	_ extLayer                   = (*XRRLayer)(nil)
	_ extLayer                   = (*XCSLayer)(nil)
	_ extLayer                   = (*XTPTargetLayer)(nil)
	_ extLayer                   = (*XTPControllerLayer)(nil)
	_ gopacket.SerializableLayer = (*XRHLayer)(nil)
	_ gopacket.SerializableLayer = (*XRRLayer)(nil)
	_ gopacket.SerializableLayer = (*XCSLayer)(nil)
	_ gopacket.SerializableLayer = (*XTPTargetLayer)(nil)
	_ gopacket.SerializableLayer = (*XTPControllerLayer)(nil)
)
