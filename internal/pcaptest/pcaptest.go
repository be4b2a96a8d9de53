// Package pcaptest holds what tests share about captures: the out-of-band
// TCP exchanges of the real captures they replay (cm/testdata: rxe peers
// running rdma-core's and perftest's tools), and the golden-file
// comparison and dump --verify check of the captures they make.
package pcaptest

import (
	"io"
	"os"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// A Segment is one TCP payload of a captured exchange.
type Segment struct {
	FromClient bool // sent to the server's port
	Data       []byte
}

// TCPExchange returns the TCP payloads to and from port in the libpcap
// capture at path, in order. It fails the test when there are none.
func TCPExchange(tb testing.TB, path string, port uint16) []Segment {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var segs []Segment
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		p := gopacket.NewPacket(data, r.LinkType(), gopacket.Default)
		tl, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ok || len(tl.Payload) == 0 {
			continue
		}
		if uint16(tl.DstPort) != port && uint16(tl.SrcPort) != port {
			continue
		}
		segs = append(segs, Segment{FromClient: uint16(tl.DstPort) == port, Data: append([]byte(nil), tl.Payload...)})
	}
	if len(segs) == 0 {
		tb.Fatalf("%s: no TCP payload on port %d", path, port)
	}
	return segs
}
