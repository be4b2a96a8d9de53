package udp

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenDevice: Config.Device binds the socket to the interface (SO_BINDTODEVICE,
// checked on loopback), and an interface that does not exist is a clear
// error, not a socket on every interface.
func TestOpenDevice(t *testing.T) {
	l, err := Open(Config{Device: "lo", Port: -1, MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dev, err := unix.GetsockoptString(l.fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE)
	if err != nil || dev != "lo" {
		t.Fatalf("bound to device %q (%v), want lo", dev, err)
	}
	_, err = Open(Config{Device: "xdpnosuch0", Port: -1, MTU: 1500})
	if !errors.Is(err, unix.ENODEV) || !strings.Contains(err.Error(), "bind to device xdpnosuch0") {
		t.Fatalf("open on a missing device: %v", err)
	}
}
