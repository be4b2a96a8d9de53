// Package testenv gates tests on the privileges and tools they need, and
// holds the TCP connection pair tests of several packages use.
//
// A privileged test is named TestPrivileged* (or BenchmarkPrivileged*) so that
// `go test -run Privileged` finds all of them. It skips with a message naming
// what is missing, unless XDPROCE_REQUIRE_PRIV=1 is set (as .ci/run does), in
// which case the skip becomes a failure.
package testenv

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequirePrivEnv is the environment variable that turns privilege skips into failures.
const RequirePrivEnv = "XDPROCE_REQUIRE_PRIV"

// Required reports whether skips for missing privileges or tools must fail.
func Required() bool { return os.Getenv(RequirePrivEnv) == "1" }

// Privileged skips (or, with XDPROCE_REQUIRE_PRIV=1, fails) tb unless it runs
// as root, and fails it when its name does not start with TestPrivileged or
// BenchmarkPrivileged.
func Privileged(tb testing.TB) {
	tb.Helper()
	name := tb.Name()
	if i := strings.IndexByte(name, '/'); i >= 0 {
		name = name[:i]
	}
	if !strings.HasPrefix(name, "TestPrivileged") && !strings.HasPrefix(name, "BenchmarkPrivileged") &&
		!strings.HasPrefix(name, "ExamplePrivileged") {
		tb.Fatalf("testenv: %s needs privileges, so its name must start with TestPrivileged or BenchmarkPrivileged", name)
	}
	if os.Geteuid() != 0 {
		skip(tb, "test requires root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and RLIMIT_MEMLOCK or CAP_IPC_LOCK); run as root, or set "+RequirePrivEnv+"=1 to make this a failure")
	}
}

// Tool skips (or fails, under XDPROCE_REQUIRE_PRIV=1) tb unless the named
// program is on PATH, and returns its path.
func Tool(tb testing.TB, name, hint string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		skip(tb, "test requires "+name+" on PATH ("+hint+")")
	}
	return p
}

// Skipf skips tb, or fails it when XDPROCE_REQUIRE_PRIV=1.
func Skipf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if Required() {
		tb.Fatalf("required ("+RequirePrivEnv+"=1) but unavailable: "+format, args...)
	}
	tb.Skipf(format, args...)
}

func skip(tb testing.TB, msg string) {
	tb.Helper()
	Skipf(tb, "%s", msg)
}

// TCPPair returns the two ends of a TCP connection over 127.0.0.1, closed
// when the test ends.
func TCPPair(tb testing.TB) (client, server net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	server = <-ch
	if server == nil {
		client.Close()
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}
