package netlab

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A Counter counts the frames an interface sends and receives, by kind,
// from an AF_PACKET socket in the interface's namespace: what tcpdump would
// count, without tcpdump. Byte counts are frame lengths from the Ethernet
// header on, as the socket reports them (a segmentation-offloaded TCP
// super-frame counts once, with its whole length).
type Counter struct {
	fd   int
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	c    Counts
}

// Counts are what a Counter saw.
type Counts struct {
	TCPFrames, TCPBytes     int64 // IPv4 or IPv6, TCP
	RoCEFrames, RoCEBytes   int64 // IPv4 or IPv6, UDP to port 4791
	OtherFrames, OtherBytes int64
	// Dropped is the frames the socket lost (PACKET_STATISTICS): the counts
	// above are short by that many.
	Dropped int64
}

// Count starts counting the frames of e, both ways.
func (e *Iface) Count() (*Counter, error) {
	c := &Counter{fd: -1, stop: make(chan struct{}), done: make(chan struct{})}
	err := e.NS.Do(func() error {
		proto := htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return fmt.Errorf("netlab: count on %s: socket(AF_PACKET): %w", e.Name, err)
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: e.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("netlab: count on %s: bind(AF_PACKET): %w", e.Name, err)
		}
		c.fd = fd
		return nil
	})
	if err != nil {
		return nil, err
	}
	go c.loop()
	return c, nil
}

func (c *Counter) loop() {
	defer close(c.done)
	var buf [128]byte
	pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		// MSG_TRUNC: the frame's real length, however little of it is read.
		n, _, err := unix.Recvfrom(c.fd, buf[:], unix.MSG_TRUNC)
		if err == nil {
			c.add(buf[:min(n, len(buf))], n)
			continue
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return
		}
		_ = pollIn(pfd, 20*time.Millisecond)
	}
}

// add counts one frame of length n whose first bytes are f.
func (c *Counter) add(f []byte, n int) {
	kind := 0 // other
	if len(f) >= 14 {
		var l4 []byte
		var proto byte
		switch uint16(f[12])<<8 | uint16(f[13]) {
		case unix.ETH_P_IP:
			if len(f) >= 34 {
				ihl := int(f[14]&0x0f) * 4
				proto = f[23]
				if 14+ihl <= len(f) {
					l4 = f[14+ihl:]
				}
			}
		case unix.ETH_P_IPV6:
			if len(f) >= 54 {
				proto, l4 = f[20], f[54:]
			}
		}
		switch {
		case proto == unix.IPPROTO_TCP:
			kind = 1
		case proto == unix.IPPROTO_UDP && len(l4) >= 4 && uint16(l4[2])<<8|uint16(l4[3]) == 4791:
			kind = 2
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch kind {
	case 1:
		c.c.TCPFrames++
		c.c.TCPBytes += int64(n)
	case 2:
		c.c.RoCEFrames++
		c.c.RoCEBytes += int64(n)
	default:
		c.c.OtherFrames++
		c.c.OtherBytes += int64(n)
	}
}

// Counts returns what the counter saw so far.
func (c *Counter) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// Stop drains what the socket still holds, stops counting and returns the
// counts with the socket's drops.
func (c *Counter) Stop() (Counts, error) {
	time.Sleep(50 * time.Millisecond) // frames in flight reach the socket
	close(c.stop)
	<-c.done
	st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	unix.Close(c.fd)
	counts := c.Counts()
	if err != nil {
		return counts, fmt.Errorf("netlab: count: PACKET_STATISTICS: %w", err)
	}
	counts.Dropped = int64(st.Drops)
	return counts, nil
}
