//go:build race

package roce_test

// raceEnabled: the race detector is on. It cannot see the ordering that
// frames through kernel sockets (link/udp, AF_XDP) give between a peer's
// memory accesses and ours, so tests over those links report false races.
const raceEnabled = true
