//go:build race

package gateway

// raceEnabled: as in internal/xfer, the race detector cannot see the
// ordering between the device's engine writing registered memory and the
// reads after a control message (it runs through kernel sockets).
const raceEnabled = true
