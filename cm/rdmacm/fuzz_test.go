package rdmacm_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/cm/rdmacm"
)

// FuzzCMDecode feeds arbitrary bytes to the MAD decoder, seeded with every
// MAD of the two rxe captures and one xdproce-built message of each type.
// It must never panic; every error must match a sentinel; and what decodes
// must re-encode, decode to the same header and message, and re-encode to
// the same bytes (decode → encode → decode is stable; only reserved bits may
// differ from the input).
func FuzzCMDecode(f *testing.F) {
	for _, name := range []string{"rdmacm_rping", "rdmacm_write_bw"} {
		mads, _ := rxeCapture(f, name)
		for _, m := range mads {
			f.Add(m.mad)
		}
	}
	for _, m := range xdproceMessages(f) {
		f.Add(encode(f, 3, m))
	}
	sentinels := []error{rdmacm.ErrLength, rdmacm.ErrNotCM, rdmacm.ErrVersion, rdmacm.ErrMethod,
		rdmacm.ErrUnknownAttr, rdmacm.ErrBadField}
	f.Fuzz(func(t *testing.T, mad []byte) {
		h, m, err := rdmacm.Decode(mad)
		if err != nil {
			known := false
			for _, s := range sentinels {
				known = known || errors.Is(err, s)
			}
			if !known || m != nil {
				t.Fatalf("Decode error %v (message %v) matches no sentinel", err, m)
			}
			return
		}
		buf := make([]byte, rdmacm.MADLen)
		if _, err := rdmacm.Encode(buf, h, m); err != nil {
			t.Fatalf("re-encode of a decoded %v: %v", m.AttrID(), err)
		}
		h2, m2, err := rdmacm.Decode(buf)
		if err != nil {
			t.Fatalf("decode of the re-encoded %v: %v", m.AttrID(), err)
		}
		if h2 != h {
			t.Fatalf("header changed: %+v → %+v", h, h2)
		}
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Fatalf("message changed (-first +second):\n%s", diff)
		}
		buf2 := make([]byte, rdmacm.MADLen)
		if _, err := rdmacm.Encode(buf2, h2, m2); err != nil || string(buf2) != string(buf) {
			t.Fatalf("second encode differs (%v)", err)
		}
		if m.String() == "" {
			t.Fatal("empty summary")
		}
	})
}
