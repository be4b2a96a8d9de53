//go:build !linux

package roce

import (
	"fmt"

	"github.com/xdproce/xdproce/link"
)

// ProbeAFXDP reports that AF_XDP is Linux only.
func ProbeAFXDP(ifname string) error {
	return fmt.Errorf("probe %s: %w", ifname, link.ErrNotSupported)
}

// MissingCapabilities is nil: there are no capabilities to grant.
func MissingCapabilities() []string { return nil }
