//go:build !linux

package roce

import (
	"fmt"

	"github.com/xdproce/xdproce/link"
)

// Open is only available on Linux.
func Open(ifname string, opts *Options) (*Device, error) {
	return nil, fmt.Errorf("roce: open %s: %w", ifname, link.ErrNotSupported)
}

// Privileged reports false: AF_XDP is Linux only.
func Privileged() (bool, string) { return false, "AF_XDP needs Linux" }

// ProbeLinkFacts is only available on Linux.
func ProbeLinkFacts(ifname string) (LinkFacts, error) {
	return LinkFacts{}, fmt.Errorf("probe %s: %w", ifname, link.ErrNotSupported)
}
