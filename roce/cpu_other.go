//go:build !linux

package roce

import (
	"errors"
	"runtime"
)

func checkCPUs([]int) error {
	return errors.New("options: cpus: pinning is not implemented on " + runtime.GOOS)
}

func pinThread([]int) (func(), error) { return nil, checkCPUs(nil) }
