//go:build !linux

package daemon

import (
	"fmt"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/roce"
)

// Daemon is Linux only.
type Daemon struct{}

// Start reports that the daemon is Linux only (AF_XDP, memfd ports).
func Start(Config) (*Daemon, error) {
	return nil, fmt.Errorf("daemon: %w", link.ErrNotSupported)
}

func (*Daemon) Socket() string               { return "" }
func (*Daemon) Interface() string            { return "" }
func (*Daemon) LinkName() string             { return "" }
func (*Daemon) Close() error                 { return nil }
func (*Daemon) Stats() Stats                 { return Stats{} }
func (*Daemon) Snapshot(bool) *roce.Snapshot { return &roce.Snapshot{} }
