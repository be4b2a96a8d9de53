package cli

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/roce"
)

func TestBusyPollFlag(t *testing.T) {
	var b busyPollFlag
	if b.value() != 0 || b.String() != "0s" {
		t.Fatalf("default %v %q, want 0 (off)", b.value(), b.String())
	}
	for in, want := range map[string]time.Duration{"0": 0, "50us": 50 * time.Microsecond, "auto": roce.BusyPollAuto} {
		if err := b.Set(in); err != nil || b.value() != want {
			t.Errorf("Set(%q): %v, value %v, want %v", in, err, b.value(), want)
		}
	}
	for _, in := range []string{"-1ms", "fast", ""} {
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) accepted", in)
		}
	}
}
