package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/testenv"
)

// inNetns runs f on a thread moved into the named network namespace. The thread is never
// unlocked, so the runtime discards it when f returns.
func inNetns(t *testing.T, name string, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// An unreachable host gives a clear error naming the address and the cause, after the retry
// window, in a namespace of our own (198.51.100.0/24 routed nowhere, or onto a veth where nobody answers).
func TestPrivilegedDialUnreachable(t *testing.T) {
	testenv.Privileged(t)
	testenv.Tool(t, "ip", "iproute2")
	ns := fmt.Sprintf("xdp-cm-%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")

	// No route at all: ENETUNREACH, retried for the window, then reported.
	err := inNetns(t, ns, func() error {
		t0 := time.Now()
		_, err := Dial(context.Background(), "198.51.100.9", &Config{Retry: 300 * time.Millisecond, Backoff: 50 * time.Millisecond})
		if d := time.Since(t0); d < 250*time.Millisecond || d > 5*time.Second {
			return fmt.Errorf("gave up after %v", d)
		}
		return err
	})
	if !errors.Is(err, syscall.ENETUNREACH) || !strings.Contains(err.Error(), "198.51.100.9:18515") {
		t.Errorf("no route: %v, want ENETUNREACH naming 198.51.100.9:18515", err)
	}

	// A route onto a link where nobody answers ARP: each attempt times out.
	run(t, "ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	run(t, "ip", "-n", ns, "addr", "add", "198.51.100.1/24", "dev", "d0")
	run(t, "ip", "-n", ns, "link", "set", "d0", "up")
	run(t, "ip", "-n", ns, "link", "set", "d1", "up")
	err = inNetns(t, ns, func() error {
		_, err := Dial(context.Background(), "198.51.100.9", &Config{Retry: 400 * time.Millisecond, Timeout: 150 * time.Millisecond})
		return err
	})
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "198.51.100.9:18515") || !strings.Contains(err.Error(), "attempts") {
		t.Errorf("silent host: %v, want a timeout naming the address", err)
	}
}
