package cli

import (
	"runtime"
	"strings"
	"testing"
)

// TestParseFileAddr: the HOST[:PORT][:NAME] forms of copy's arguments.
func TestParseFileAddr(t *testing.T) {
	for in, want := range map[string]fileAddr{
		"198.51.100.2:a.bin":            {host: "198.51.100.2", ip: "198.51.100.2", name: "a.bin"},
		"198.51.100.2:9000:a.bin":       {host: "198.51.100.2:9000", ip: "198.51.100.2", name: "a.bin"},
		"198.51.100.3":                  {host: "198.51.100.3", ip: "198.51.100.3"},
		"198.51.100.3:9000":             {host: "198.51.100.3:9000", ip: "198.51.100.3"},
		"[2001:db8::3]:b.bin":           {host: "[2001:db8::3]", ip: "2001:db8::3", name: "b.bin"},
		"[2001:db8::3]:9000:b.bin":      {host: "[2001:db8::3]:9000", ip: "2001:db8::3", name: "b.bin"},
		"[2001:db8::3]":                 {host: "[2001:db8::3]", ip: "2001:db8::3"},
		"host.example:data:with:colons": {host: "host.example", ip: "host.example", name: "data:with:colons"},
		"host.example:1234:42":          {host: "host.example:1234", ip: "host.example", name: "42"},
	} {
		got, err := parseFileAddr(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"2001:db8::3", "2001:db8::3:a.bin", "[2001:db8::3", "[2001:db8::3]x", ":a.bin",
		"198.51.100.2:0:a.bin", "198.51.100.2:70000:a.bin"} {
		if got, err := parseFileAddr(in); err == nil {
			t.Errorf("%q: accepted as %+v", in, got)
		}
	}
}

// TestCopyUsage: copy's usage errors, before any device or connection.
func TestCopyUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"copy", "198.51.100.2:a"}, "want HOST_S:NAME HOST_T[:NEWNAME], got 1"},
		{[]string{"copy", "198.51.100.2", "198.51.100.3"}, "names no file"},
		{[]string{"copy", "2001:db8::2:a", "198.51.100.3"}, "in brackets"},
		{[]string{"copy", "198.51.100.2:../x", "198.51.100.3"}, "without directories"},
		{[]string{"copy", "198.51.100.2:a", "198.51.100.3:.hidden"}, "hidden"},
		{[]string{"copy", "--tls-cert", "x", "198.51.100.2:a", "198.51.100.3"}, "--tls-cert and --tls-key go together"},
	} {
		_, _, err := run(t, c.args...)
		if ExitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (exit %d), want a usage error with %q", c.args, err, ExitCode(err), c.want)
		}
	}
}

// TestRouteDev: copy's default --dev is the interface of the route to the
// source (gateway's routeDev: a UDP socket's local address, nothing sent).
func TestRouteDev(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the loopback interface is named lo on Linux")
	}
	if dev, err := routeDev("127.0.0.1"); err != nil || dev != "lo" {
		t.Fatalf("route to 127.0.0.1: %q, %v", dev, err)
	}
	if _, err := routeDev("no-such-host.invalid"); err == nil {
		t.Fatal("an unresolvable host has a route")
	}
}
