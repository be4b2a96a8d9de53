//go:build !linux

package shm

import (
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/xdproce/xdproce/link"
)

// A Link is one end of a shared-memory port (Linux only).
type Link struct{}

var (
	_ link.Link   = (*Link)(nil)
	_ link.Napper = (*Link)(nil)
)

var errUnsupported = fmt.Errorf("shm: memfd ports need Linux, not %s: %w", runtime.GOOS, link.ErrNotSupported)

// NewPort returns an error wrapping link.ErrNotSupported outside Linux.
func NewPort(Config) (*Link, *PortFds, error) { return nil, nil, errUnsupported }

// Attach returns an error wrapping link.ErrNotSupported outside Linux.
func Attach(*PortFds) (*Link, error) { return nil, errUnsupported }

// SendPort returns an error wrapping link.ErrNotSupported outside Linux.
func SendPort(*net.UnixConn, *PortFds) error { return errUnsupported }

// ReceivePort returns an error wrapping link.ErrNotSupported outside Linux.
func ReceivePort(*net.UnixConn) (*PortFds, error) { return nil, errUnsupported }

// Close returns an error wrapping link.ErrNotSupported outside Linux.
func (*PortFds) Close() error { return errUnsupported }

func (*Link) Receive([][]byte) (int, error) { return 0, errUnsupported }
func (*Link) Alloc([][]byte) int            { return 0 }
func (*Link) Send([][]byte) error           { return errUnsupported }
func (*Link) Free([][]byte)                 {}
func (*Link) Wait(time.Duration) error      { return errUnsupported }
func (*Link) Nap(time.Duration) error       { return errUnsupported }
func (*Link) Wake()                         {}
func (*Link) Props() link.Props             { return link.Props{Name: "shm"} }
func (*Link) Close() error                  { return errUnsupported }
func (*Link) Stats() Stats                  { return Stats{} }
func (*Link) PeerGone() bool                { return false }
