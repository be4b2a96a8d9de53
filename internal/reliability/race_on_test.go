//go:build race

package reliability

// raceEnabled: the race detector slows everything several times and keeps
// its shadow memory, so RSS limits do not apply and timeouts are longer.
const raceEnabled = true
