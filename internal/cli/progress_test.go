package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgressBar: no bar on a non-terminal; the bar shows the fraction,
// sizes, a rate and an ETA, is throttled, and its line ends on finish.
func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	if p := newProgress(&buf, "x", false); p != nil {
		t.Fatal("progress bar on a bytes.Buffer")
	}
	if p := newProgress(&buf, "x", true); p == nil {
		t.Fatal("no progress bar when forced (send --progress)")
	}
	var nilBar *progressBar
	nilBar.finish() // no-op
	p := &progressBar{w: &buf, label: "file", start: time.Now().Add(-time.Second)}
	p.update(16<<20, 64<<20)
	out := buf.String()
	for _, want := range []string{"\rfile [======>", " 25%", "16.0 MiB/64.0 MiB", "Gb/s", "ETA 0:0"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar %q lacks %q", out, want)
		}
	}
	p.update(17<<20, 64<<20) // within 100 ms: not drawn
	if buf.String() != out {
		t.Errorf("redrawn within 100 ms: %q", buf.String())
	}
	p.update(64<<20, 64<<20) // the end is always drawn
	p.finish()
	if !strings.Contains(buf.String(), "100%") || !strings.HasSuffix(buf.String(), "\n") {
		t.Errorf("final bar %q", buf.String())
	}
}
