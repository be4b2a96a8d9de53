//go:build !linux

package udp

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/xdproce/xdproce/link"
)

// A Link is a RoCEv2 link over a kernel UDP socket (Linux only).
type Link struct{}

var _ link.Link = (*Link)(nil)

// Open returns an error wrapping link.ErrNotSupported outside Linux.
func Open(cfg Config) (*Link, error) {
	return nil, fmt.Errorf("udp: open: %w on %s", link.ErrNotSupported, runtime.GOOS)
}

var errClosed = errors.New("udp: not implemented")

func (l *Link) Receive(frames [][]byte) (int, error) { return 0, errClosed }
func (l *Link) Alloc(bufs [][]byte) int              { return 0 }
func (l *Link) Send(frames [][]byte) error           { return errClosed }
func (l *Link) Free(bufs [][]byte)                   {}
func (l *Link) Wait(timeout time.Duration) error     { return errClosed }
func (l *Link) Wake()                                {}
func (l *Link) Props() link.Props                    { return link.Props{Name: "UDP"} }
func (l *Link) Close() error                         { return errClosed }
func (l *Link) Stats() Stats                         { return Stats{} }
func (l *Link) LocalPort() uint16                    { return 0 }

// ICRCChecked reports false: nothing is received here.
func (l *Link) ICRCChecked(int) bool { return false }
