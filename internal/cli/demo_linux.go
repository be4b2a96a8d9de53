package cli

import "syscall"

// dieWithParent makes a child of the demo receive SIGTERM when the demo
// dies, even by SIGKILL, so no serve is left running in a lab namespace.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
