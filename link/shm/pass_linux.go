package shm

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// SendPort passes p's descriptors over the unix socket c (SCM_RIGHTS, with a
// one-byte message carrying the port version) and then closes this
// process's copies of them, whether or not the send succeeded.
func SendPort(c *net.UnixConn, p *PortFds) error {
	defer p.Close()
	for _, fd := range p.list() {
		if *fd < 0 {
			return errors.New("shm: send port: missing descriptor")
		}
	}
	rights := unix.UnixRights(p.Mem, p.Down, p.Up, p.Live)
	if _, _, err := c.WriteMsgUnix([]byte{version}, rights, nil); err != nil {
		return fmt.Errorf("shm: send port: %w", err)
	}
	return nil
}

// ReceivePort reads one message from c carrying a port's descriptors, as
// SendPort writes it, for Attach. A message with another payload, a
// truncated control message, or other than exactly the four descriptors is
// refused, and whatever descriptors it carried are closed.
func ReceivePort(c *net.UnixConn) (*PortFds, error) {
	var buf [8]byte
	oob := make([]byte, unix.CmsgSpace(16*4)) // room to see (and close) too many
	n, oobn, flags, _, err := c.ReadMsgUnix(buf[:], oob)
	if err != nil {
		return nil, fmt.Errorf("shm: receive port: %w", err)
	}
	var fds []int
	msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	switch {
	case perr != nil:
		err = fmt.Errorf("bad control message: %w", perr)
	case flags&unix.MSG_CTRUNC != 0:
		err = errors.New("control message truncated")
	case n != 1 || buf[0] != version:
		err = fmt.Errorf("message of %d bytes (% x), want the one-byte version %d", n, buf[:n], version)
	case len(fds) != 4:
		err = fmt.Errorf("%d descriptors, want 4", len(fds))
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("shm: receive port: %w", err)
	}
	return &PortFds{Mem: fds[0], Down: fds[1], Up: fds[2], Live: fds[3]}, nil
}
