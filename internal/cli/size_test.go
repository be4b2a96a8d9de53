package cli

import (
	"flag"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"4096", 4096},
		{"64KiB", 64 << 10},
		{"64kib", 64 << 10},
		{"64K", 64 << 10},
		{"64k", 64 << 10},
		{"1MiB", 1 << 20},
		{"1M", 1 << 20},
		{"2GiB", 2 << 30},
		{"1TiB", 1 << 40},
		{"1.5MiB", 3 << 19},
		{"0.5KiB", 512},
		{"10MB", 10_000_000},
		{"1kB", 1000},
		{"2GB", 2_000_000_000},
		{"512B", 512},
		{"512b", 512},
		{" 8 KiB ", 8 << 10},
		{"9223372036854775807", 1<<63 - 1},
		{"8191PiB", -1}, // unknown unit
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if tt.want < 0 {
			if err == nil {
				t.Errorf("ParseSize(%q) = %d, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "KiB", "-1", "-1KiB", "+5", "1.3B", "0.1KiB", "1e3", "abc", "1..5MiB", "9223372036854775808", "8388608TiB", "10 20"} {
		if n, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", bad, n)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 4096: "4KiB", 3 << 19: "1536KiB", 1 << 20: "1MiB", 2 << 30: "2GiB", 1 << 40: "1TiB", 1 << 50: "1024TiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestSizeFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	s := Size(4096)
	fs.Var(&s, "size", "message size")
	if err := fs.Parse([]string{"--size", "1.5MiB"}); err != nil {
		t.Fatal(err)
	}
	if s != 3<<19 || s.String() != "1536KiB" {
		t.Errorf("size = %d (%s)", s, s.String())
	}
	if err := fs.Parse([]string{"--size", "lots"}); err == nil {
		t.Error("--size lots accepted")
	}
}
