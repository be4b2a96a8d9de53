//go:build race

package xfer

// raceEnabled: the race detector cannot see the ordering between the
// device's engine writing registered memory (a peer's RDMA WRITE, a READ
// response) and this package reading it after a control message: that
// order runs through kernel sockets.
const raceEnabled = true
