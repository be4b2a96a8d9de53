package cli

import (
	"errors"
	"strings"
	"testing"
)

// TestMcastUsage: mcast's command-line mistakes are usage errors, before
// any device is opened.
func TestMcastUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"mcast"}, "want 'mcast send ... FILE' or 'mcast recv ...'"},
		{[]string{"mcast", "push", "--group", "239.1.2.3"}, "want 'mcast send"},
		{[]string{"mcast", "send", "--insecure", "f"}, `--group "": want an IPv4 or IPv6 multicast address`},
		{[]string{"mcast", "send", "--group", "198.51.100.1", "--dev", "lo", "--insecure", "f"}, "want an IPv4 or IPv6 multicast address (239.0.0.0/8"},
		{[]string{"mcast", "send", "--group", "2001:db8::1", "--dev", "lo", "--insecure", "f"}, "or a broadcast address of lo"},
		{[]string{"mcast", "send", "--group", "239.1.2.3", "f"}, "--psk-file FILE is required (or --insecure"},
		{[]string{"mcast", "send", "--group", "239.1.2.3", "--insecure", "--psk-file", "k", "f"}, "exclude each other"},
		{[]string{"mcast", "send", "--group", "239.1.2.3", "--insecure"}, "mcast send takes one FILE"},
		{[]string{"mcast", "send", "--group", "239.1.2.3", "--insecure", "--tries", "0", "f"}, "--tries and --wait must be positive"},
		{[]string{"mcast", "recv", "--group", "239.1.2.3", "--insecure"}, "mcast recv needs --dir DIR"},
		{[]string{"mcast", "recv", "--group", "239.1.2.3", "--insecure", "--dir", ".", "extra"}, "mcast recv takes no arguments"},
		{[]string{"mcast", "recv", "--group", "239.1.2.3", "--insecure", "--port", "0", "--dir", "."}, "--port 0"},
	} {
		_, _, err := run(t, tt.args...)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%q: %v, want a usage error containing %q", tt.args, err, tt.msg)
		}
	}
}
