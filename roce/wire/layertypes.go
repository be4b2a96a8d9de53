package wire

import (
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// gopacket layer types, in the block 1791..1803 of the range gopacket keeps
// for fast application layers (1000..1999); 1799.. are the OOO headers. UDP port 4791 is hooked to
// LayerTypeBTH in init, the one registration with gopacket/layers.
var (
	LayerTypeBTH          = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{Name: "BTH", Decoder: gopacket.DecodeFunc(decodeBTH)})
	LayerTypeRETH         = gopacket.RegisterLayerType(1792, gopacket.LayerTypeMetadata{Name: "RETH", Decoder: gopacket.DecodeFunc(decodeExtLayer[RETHLayer])})
	LayerTypeAETH         = gopacket.RegisterLayerType(1793, gopacket.LayerTypeMetadata{Name: "AETH", Decoder: gopacket.DecodeFunc(decodeExtLayer[AETHLayer])})
	LayerTypeAtomicETH    = gopacket.RegisterLayerType(1794, gopacket.LayerTypeMetadata{Name: "AtomicETH", Decoder: gopacket.DecodeFunc(decodeExtLayer[AtomicETHLayer])})
	LayerTypeAtomicAckETH = gopacket.RegisterLayerType(1795, gopacket.LayerTypeMetadata{Name: "AtomicAckETH", Decoder: gopacket.DecodeFunc(decodeExtLayer[AtomicAckETHLayer])})
	LayerTypeDETH         = gopacket.RegisterLayerType(1796, gopacket.LayerTypeMetadata{Name: "DETH", Decoder: gopacket.DecodeFunc(decodeExtLayer[DETHLayer])})
	LayerTypeImmDt        = gopacket.RegisterLayerType(1797, gopacket.LayerTypeMetadata{Name: "ImmDt", Decoder: gopacket.DecodeFunc(decodeExtLayer[ImmDtLayer])})
	LayerTypeIETH         = gopacket.RegisterLayerType(1798, gopacket.LayerTypeMetadata{Name: "IETH", Decoder: gopacket.DecodeFunc(decodeExtLayer[IETHLayer])})

	LayerTypeXRH           = gopacket.RegisterLayerType(1799, gopacket.LayerTypeMetadata{Name: "XRH", Decoder: gopacket.DecodeFunc(decodeExtLayer[XRHLayer])})
	LayerTypeXRR           = gopacket.RegisterLayerType(1800, gopacket.LayerTypeMetadata{Name: "XRR", Decoder: gopacket.DecodeFunc(decodeExtLayer[XRRLayer])})
	LayerTypeXCS           = gopacket.RegisterLayerType(1801, gopacket.LayerTypeMetadata{Name: "XCS", Decoder: gopacket.DecodeFunc(decodeExtLayer[XCSLayer])})
	LayerTypeXTPTarget     = gopacket.RegisterLayerType(1802, gopacket.LayerTypeMetadata{Name: "XTPTarget", Decoder: gopacket.DecodeFunc(decodeExtLayer[XTPTargetLayer])})
	LayerTypeXTPController = gopacket.RegisterLayerType(1803, gopacket.LayerTypeMetadata{Name: "XTPController", Decoder: gopacket.DecodeFunc(decodeExtLayer[XTPControllerLayer])})
)

func init() {
	layers.RegisterUDPPortLayerType(UDPPort, LayerTypeBTH)
}
