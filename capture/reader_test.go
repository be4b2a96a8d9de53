package capture

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdproce/xdproce/internal/testenv"
)

func pcapFile(t testing.TB, nanos bool) ([]byte, []testFrame) {
	t.Helper()
	var buf bytes.Buffer
	var w *pcapgo.Writer
	if nanos {
		w = pcapgo.NewWriterNanos(&buf)
	} else {
		w = pcapgo.NewWriter(&buf)
	}
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	frames := sampleFrames()
	for i := range frames {
		frames[i].iface, frames[i].dir = 0, DirUnknown
		if !nanos {
			frames[i].ts = frames[i].ts.Truncate(time.Microsecond)
		}
		f := frames[i]
		ci := gopacket.CaptureInfo{Timestamp: f.ts, CaptureLength: len(f.data), Length: len(f.data)}
		if err := w.WritePacket(ci, f.data); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), frames
}

func TestReaderPcap(t *testing.T) {
	for _, nanos := range []bool{false, true} {
		file, want := pcapFile(t, nanos)
		r, err := NewReader(bytes.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		if r.Format() != FormatPcap {
			t.Errorf("format %v", r.Format())
		}
		var f Frame
		for i, w := range want {
			if err := r.Next(&f); err != nil {
				t.Fatalf("nanos=%v frame %d: %v", nanos, i, err)
			}
			if !bytes.Equal(f.Data, w.data) || !f.Time.Equal(w.ts) || f.Dir != DirUnknown || f.LinkType != LinkTypeEthernet {
				t.Errorf("nanos=%v frame %d: got %x %v %v %d, want %x %v", nanos, i, f.Data, f.Time, f.Dir, f.LinkType, w.data, w.ts)
			}
		}
		if err := r.Next(&f); err != io.EOF {
			t.Errorf("after last: %v, want io.EOF", err)
		}
	}
}

// TestReaderBigEndianPcap converts a little-endian pcap to big-endian by hand.
func TestReaderBigEndianPcap(t *testing.T) {
	file, want := pcapFile(t, true)
	be := bytes.Clone(file)
	swap := func(b []byte) {
		for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
			b[i], b[j] = b[j], b[i]
		}
	}
	swap(be[0:4])
	swap(be[4:6])
	swap(be[6:8])
	for _, o := range []int{8, 12, 16, 20} {
		swap(be[o : o+4])
	}
	off := 24
	for range want {
		for k := 0; k < 16; k += 4 {
			swap(be[off+k : off+k+4])
		}
		n := int(le.Uint32(file[off+8:]))
		off += 16 + n
	}
	r, err := NewReader(bytes.NewReader(be))
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	for i, w := range want {
		if err := r.Next(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(f.Data, w.data) || !f.Time.Equal(w.ts) {
			t.Errorf("frame %d: got %x %v, want %x %v", i, f.Data, f.Time, w.data, w.ts)
		}
	}
}

// TestReaderRxeCaptures reads the real rxe captures; frame counts are those
// capinfos reports.
func TestReaderRxeCaptures(t *testing.T) {
	want := map[string]int{"rc_pingpong.pcap": 34, "atomic_bw_cas.pcap": 52, "write_bw.pcap": 66, "ud_pingpong.pcap": 21}
	for name, n := range want {
		data, err := os.ReadFile(filepath.Join("..", "testdata", "rxe", name))
		if err != nil {
			t.Skipf("rxe captures not available: %v", err)
		}
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var f Frame
		got := 0
		for {
			err := r.Next(&f)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got++
		}
		if got != n {
			t.Errorf("%s: %d frames, want %d", name, got, n)
		}
	}
}

func TestReaderNotCapture(t *testing.T) {
	for _, in := range []string{"", "abc", "hello, world\n", "\x0a\x0d\x0d"} {
		if _, err := NewReader(bytes.NewReader([]byte(in))); !errors.Is(err, ErrNotCapture) {
			t.Errorf("NewReader(%q) = %v, want ErrNotCapture", in, err)
		}
	}
	if ErrNotCapture.Error() != "capture: not a pcap or pcapng file" {
		t.Errorf("ErrNotCapture text %q", ErrNotCapture)
	}
}

// TestReaderTruncated cuts valid pcap and pcapng files at every length: the
// reader must return the frames before the cut and then ErrTruncated (or
// ErrNotCapture for a cut inside the magic), never panic or succeed silently.
func TestReaderTruncated(t *testing.T) {
	png := writeSample(t)
	pc, _ := pcapFile(t, false)
	for name, file := range map[string][]byte{"pcapng": png, "pcap": pc} {
		for cut := 0; cut < len(file); cut++ {
			err := readAll(file[:cut])
			if cut < 4 {
				if !errors.Is(err, ErrNotCapture) {
					t.Errorf("%s cut at %d: %v, want ErrNotCapture", name, cut, err)
				}
				continue
			}
			if err == nil {
				// A cut exactly between records is a valid shorter file.
				continue
			}
			if !errors.Is(err, ErrTruncated) {
				t.Errorf("%s cut at %d: %v, want ErrTruncated", name, cut, err)
			}
		}
		if err := readAll(file); err != nil {
			t.Errorf("%s whole file: %v", name, err)
		}
	}
}

func TestReaderMalformed(t *testing.T) {
	png := writeSample(t)
	// Byte 8 of the EPB (first frame) is its interface id; 7 is undescribed.
	firstEPB := 0
	for le.Uint32(png[firstEPB:]) != blockEPB {
		firstEPB += int(le.Uint32(png[firstEPB+4:]))
	}
	bad := bytes.Clone(png)
	bad[firstEPB+8] = 7
	if err := readAll(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("undescribed interface: %v, want ErrMalformed", err)
	}
	bad = bytes.Clone(png)
	bad[firstEPB+4]++ // block length not a multiple of 4
	if err := readAll(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad block length: %v, want ErrMalformed", err)
	}
	bad = bytes.Clone(png)
	bad[8] ^= 0xFF // byte-order magic
	if err := readAll(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad byte-order magic: %v, want ErrMalformed", err)
	}
}

func readAll(file []byte) error {
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		return err
	}
	var f Frame
	for {
		if err := r.Next(&f); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add(writeSample(f))
	pc, _ := pcapFile(f, true)
	f.Add(pc)
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		var fr Frame
		for range 10000 {
			if err := r.Next(&fr); err != nil {
				return
			}
			if len(fr.Data) > fr.OrigLen {
				t.Fatalf("data %d bytes > orig %d", len(fr.Data), fr.OrigLen)
			}
		}
	})
}

// TestReaderTsharkPcapng converts an rxe pcap to pcapng with tshark (other
// block options, microsecond if_tsresol) and checks that both read the same.
func TestReaderTsharkPcapng(t *testing.T) {
	tshark := testenv.Tool(t, "tshark", "apt-get install tshark")
	src := "../testdata/rxe/verbs_ops.pcap"
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no rxe capture: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "v.pcapng")
	if out, err := exec.Command(tshark, "-r", src, "-F", "pcapng", "-w", dst).CombinedOutput(); err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	ra, err := NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if rb.Format() != FormatPcapng {
		t.Fatalf("tshark output read as %v", rb.Format())
	}
	var fa, fb Frame
	n := 0
	for {
		ea, eb := ra.Next(&fa), rb.Next(&fb)
		if ea == io.EOF && eb == io.EOF {
			break
		}
		if ea != nil || eb != nil {
			t.Fatalf("frame %d: %v / %v", n+1, ea, eb)
		}
		n++
		if !bytes.Equal(fa.Data, fb.Data) || !fa.Time.Equal(fb.Time) || fb.LinkType != LinkTypeEthernet {
			t.Errorf("frame %d differs: %v %v", n, fa.Time, fb.Time)
		}
	}
	if n != 28 {
		t.Errorf("%d frames, want 28", n)
	}
}
