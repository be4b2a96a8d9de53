//go:build !linux

package cli

import "syscall"

// dieWithParent: the lab demo runs only on Linux.
func dieWithParent() *syscall.SysProcAttr { return nil }
