package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// benchCMPair runs `bench NAME -R` between two devices joined by link/pipe (the server
// 198.51.100.1, the client 198.51.100.2, path MTU 1024), in this process, and returns both
// sides' results and the client device's capture.
func benchCMPair(t *testing.T, name string, size, iters int) (srv, cli []benchResult, pcap []byte) {
	t.Helper()
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var capBuf syncBuffer
	ip := func(i byte) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, 100, i}) }
	sdev, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{ip(1)}})
	if err != nil {
		t.Fatal(err)
	}
	defer sdev.Close()
	cdev, err := roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{ip(2)}, Capture: &capBuf})
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Stdout: io.Discard, Stderr: io.Discard}
	mk := func(dev *roce.Device, i byte) *bench {
		return &bench{env: env, dev: dev, test: benchTests[name], name: name, size: size, iters: iters, qps: 1,
			sgid: ip(i), mtu: roce.MTU1024, mode: cm.ModeRC, rdmaCM: true}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv, serr = mk(sdev, 1).serverCM(ctx, cm.DefaultPort)
	}()
	cli, err = mk(cdev, 2).clientCM(ctx, "198.51.100.1", cm.DefaultPort, 10*time.Second)
	wg.Wait()
	if err != nil || serr != nil {
		t.Fatalf("client: %v; server: %v", err, serr)
	}
	cdev.Close()
	return srv, cli, []byte(capBuf.String())
}

// TestBenchCM: write, read and send with -R between two xdproce ends: both report the
// client's size and iterations.
func TestBenchCM(t *testing.T) {
	for _, name := range []string{"write", "read", "send"} {
		t.Run(name, func(t *testing.T) {
			srv, cli, _ := benchCMPair(t, name, 4096, 50)
			for who, r := range map[string][]benchResult{"server": srv, "client": cli} {
				if len(r) != 1 || r[0].Bytes != 4096 || r[0].Iters != 50 || r[0].BW <= 0 {
					t.Errorf("%s: %+v", who, r)
				}
			}
		})
	}
}

var _ = strings.Contains
var _ = bytes.Equal
var _ = fmt.Sprint
var _ = netlab.Pair
var _ = testenv.Privileged
