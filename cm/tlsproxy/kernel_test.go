package tlsproxy

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm/ktls"
)

// RequireKTLSEnv turns TestKernelTLS's skip (no kernel TLS here) into a failure. It is
// separate from XDPROCE_REQUIRE_PRIV: CI machines without the tls module are still complete.
const RequireKTLSEnv = "XDPROCE_REQUIRE_KTLS"

// The kernel's record layer, where the kernel has it: a stock client exchanges 1 MiB each
// way and getsockopt(SOL_TLS, TLS_TX) shows the session installed.
func TestKernelTLS(t *testing.T) {
	l := newLab(t)
	res := l.serveMode(l.sock, ktls.KernelRequire)
	nc, err := net.Dial("tcp", l.tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(nc, &tls.Config{RootCAs: l.roots, ServerName: "xdproce", MinVersion: tls.VersionTLS13})
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	herr := tc.Handshake()
	r := <-res
	if errors.Is(r.err, ktls.ErrNoKernelTLS) {
		if os.Getenv(RequireKTLSEnv) == "1" {
			t.Fatalf("%s=1 but: %v", RequireKTLSEnv, r.err)
		}
		t.Skipf("no kernel TLS on this machine (set %s=1 to make this a failure): %v", RequireKTLSEnv, r.err)
	}
	if r.err != nil || herr != nil {
		t.Fatalf("endpoint: %v; client: %v", r.err, herr)
	}
	defer r.c.Close()
	if !r.c.Kernel() || !ktls.KernelInstalled(r.c) {
		t.Fatalf("mode %q; getsockopt TLS_TX installed: %v", r.c.Mode(), ktls.KernelInstalled(r.c))
	}
	r.c.SetDeadline(time.Now().Add(20 * time.Second))
	exchange(t, r.c, tc, mib)
}
