package capture

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdproce/xdproce/internal/testenv"
)

type testFrame struct {
	iface int
	ts    time.Time
	dir   Direction
	data  []byte
}

// sampleFrames has lengths 60..63 (every padding case), both directions,
// unknown direction, two interfaces and a sub-second timestamp.
func sampleFrames() []testFrame {
	var out []testFrame
	base := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)
	dirs := []Direction{DirInbound, DirOutbound, DirUnknown, DirOutbound}
	for i := range 4 {
		d := make([]byte, 60+i)
		for j := range d {
			d[j] = byte(i*31 + j)
		}
		out = append(out, testFrame{iface: i % 2, ts: base.Add(time.Duration(i) * 1001 * time.Nanosecond), dir: dirs[i], data: d})
	}
	return out
}

func writeSample(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, ifc := range []Interface{{Name: "veth0", Description: "xdproce AF_XDP (native)"}, {Name: "lo1", Description: "pipe"}} {
		id, err := w.AddInterface(ifc)
		if err != nil || id != i {
			t.Fatalf("AddInterface = %d, %v; want %d", id, err, i)
		}
	}
	for _, f := range sampleFrames() {
		if err := w.WritePacket(f.iface, f.ts, f.dir, f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestWriterExactBytes pins the block layout of a minimal file, byte for byte,
// against the pcapng specification (all little-endian).
func TestWriterExactBytes(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, &WriterOptions{Application: "ab"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(Interface{Name: "eth", Description: "d"}); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacketNanos(0, 0x0000000100000002, DirOutbound, []byte{0xAA, 0xBB, 0xCC, 0xDD, 0xEE}); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacketNanos(0, 3, DirUnknown, []byte{0x11, 0x22, 0x33, 0x44}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		// SHB: type, len 40, BOM, v1.0, section length -1, shb_userappl "ab", end, len
		"0a0d0d0a 28000000 4d3c2b1a 0100 0000 ffffffffffffffff 0400 0200 61620000 00000000 28000000",
		// IDB: type, len 48, LINKTYPE_ETHERNET, reserved, snaplen 0,
		// if_name "eth", if_description "d", if_tsresol 9, end, len
		"01000000 30000000 0100 0000 00000000 0200 0300 65746800 0300 0100 64000000 0900 0100 09000000 00000000 30000000",
		// EPB: type, len 52, iface 0, ts high 1, ts low 2, caplen 5, origlen 5,
		// data + 3 pad, epb_flags outbound (2), end, len
		"06000000 34000000 00000000 01000000 02000000 05000000 05000000 aabbccddee000000 0200 0400 02000000 00000000 34000000",
		// EPB without options: len 36
		"06000000 24000000 00000000 00000000 03000000 04000000 04000000 11223344 24000000",
	}, "")
	wantB, err := hex.DecodeString(strings.ReplaceAll(want, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), wantB) {
		t.Fatalf("pcapng bytes differ\n got %x\nwant %x", buf.Bytes(), wantB)
	}
}

// TestWriterReadBackPcapgo reads the Writer's output with gopacket's NgReader.
func TestWriterReadBackPcapgo(t *testing.T) {
	file := writeSample(t)
	r, err := pcapgo.NewNgReader(bytes.NewReader(file), pcapgo.NgReaderOptions{WantMixedLinkType: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range sampleFrames() {
		data, ci, opts, err := r.ReadPacketDataWithOptions()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(data, want.data) {
			t.Errorf("frame %d: data %x, want %x", i, data, want.data)
		}
		if !ci.Timestamp.Equal(want.ts) || ci.InterfaceIndex != want.iface || ci.Length != len(want.data) {
			t.Errorf("frame %d: ci %v iface %d len %d, want %v %d %d", i, ci.Timestamp, ci.InterfaceIndex, ci.Length, want.ts, want.iface, len(want.data))
		}
		var dir pcapgo.NgEpbFlag
		if opts.Flags != nil {
			dir = opts.Flags.Direction
		}
		if uint8(dir) != uint8(want.dir) {
			t.Errorf("frame %d: direction %d, want %d", i, dir, want.dir)
		}
		if lt := ci.AncillaryData[0]; lt != layers.LinkTypeEthernet {
			t.Errorf("frame %d: link type %v", i, lt)
		}
	}
	if _, _, err := r.ReadPacketData(); err != io.EOF {
		t.Errorf("after last frame: %v, want EOF", err)
	}
	ifc, err := r.Interface(0)
	if err != nil {
		t.Fatal(err)
	}
	if ifc.Name != "veth0" || ifc.Description != "xdproce AF_XDP (native)" || ifc.Resolution() != gopacket.TimestampResolutionNanosecond {
		t.Errorf("interface 0 = %+v", ifc)
	}
	if app := r.SectionInfo().Application; app != "xdproce" {
		t.Errorf("shb_userappl = %q", app)
	}
}

// TestWriterReadBackOwnReader reads the Writer's output with Reader.
func TestWriterReadBackOwnReader(t *testing.T) {
	r, err := NewReader(bytes.NewReader(writeSample(t)))
	if err != nil {
		t.Fatal(err)
	}
	if r.Format() != FormatPcapng {
		t.Errorf("format %v", r.Format())
	}
	var f Frame
	for i, want := range sampleFrames() {
		if err := r.Next(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		got := testFrame{iface: f.Interface, ts: f.Time, dir: f.Dir, data: f.Data}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(testFrame{})); diff != "" {
			t.Errorf("frame %d (-want +got):\n%s", i, diff)
		}
		if f.Index != i+1 || f.LinkType != LinkTypeEthernet || f.OrigLen != len(want.data) {
			t.Errorf("frame %d: index %d link type %d origlen %d", i, f.Index, f.LinkType, f.OrigLen)
		}
	}
	if err := r.Next(&f); err != io.EOF {
		t.Errorf("after last frame: %v, want io.EOF", err)
	}
	wantIf := []Interface{{Name: "veth0", Description: "xdproce AF_XDP (native)", LinkType: 1}, {Name: "lo1", Description: "pipe", LinkType: 1}}
	if diff := cmp.Diff(wantIf, r.Interfaces()); diff != "" {
		t.Errorf("interfaces (-want +got):\n%s", diff)
	}
}

// TestWriterTshark checks that tshark reads the direction, interface name and
// nanosecond timestamps the Writer wrote.
func TestWriterTshark(t *testing.T) {
	tshark := testenv.Tool(t, "tshark", "apt-get install tshark")
	path := filepath.Join(t.TempDir(), "s.pcapng")
	if err := os.WriteFile(path, writeSample(t), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-E", "separator=|",
		"-e", "frame.interface_name", "-e", "frame.packet_flags_direction", "-e", "frame.time_epoch", "-e", "frame.len").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	want := "veth0|0x00000001|1795341600.123456789|60\n" +
		"lo1|0x00000002|1795341600.123457790|61\n" +
		"veth0||1795341600.123458791|62\n" +
		"lo1|0x00000002|1795341600.123459792|63\n"
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("tshark fields (-want +got):\n%s", diff)
	}
}

func TestWriterErrors(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(0, time.Unix(0, 0), DirInbound, []byte{1}); !errors.Is(err, ErrNoInterface) {
		t.Errorf("write before AddInterface: %v, want ErrNoInterface", err)
	}
	if _, err := w.AddInterface(Interface{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(0, time.Unix(0, 0), DirInbound, make([]byte, maxFrame+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("huge frame: %v, want ErrFrameTooLarge", err)
	}
	// A failing destination: the error is sticky and reported by Flush and Err.
	fw, err := NewWriter(failWriter{}, nil)
	if err != nil {
		t.Fatal(err) // buffered: nothing written yet
	}
	fw.AddInterface(Interface{Name: "x"})
	big := make([]byte, 70000) // larger than the buffer: forces a write
	werr := fw.WritePacket(0, time.Unix(0, 0), DirOutbound, big)
	if werr == nil || !errors.Is(werr, errDisk) {
		t.Errorf("write to failing writer: %v, want errDisk", werr)
	}
	if err := fw.WritePacket(0, time.Unix(0, 0), DirOutbound, []byte{1}); !errors.Is(err, errDisk) {
		t.Errorf("later write: %v, want sticky errDisk", err)
	}
	if err := fw.Flush(); !errors.Is(err, errDisk) {
		t.Errorf("Flush: %v, want errDisk", err)
	}
	if err := fw.Err(); !errors.Is(err, errDisk) {
		t.Errorf("Err: %v, want errDisk", err)
	}
}

var errDisk = errors.New("disk full")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errDisk }

func TestWriterNoAlloc(t *testing.T) {
	w, err := NewWriter(io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.AddInterface(Interface{Name: "x"})
	frame := make([]byte, 1078)
	ts := time.Now()
	allocs := testing.AllocsPerRun(1000, func() {
		if err := w.WritePacket(0, ts, DirInbound, frame); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("WritePacket allocates %.1f times per frame, want 0", allocs)
	}
}

func BenchmarkWritePacket(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			w, _ := NewWriter(io.Discard, nil)
			w.AddInterface(Interface{Name: "x"})
			frame := make([]byte, size)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				w.WritePacketNanos(0, 1, DirOutbound, frame)
			}
		})
	}
}
