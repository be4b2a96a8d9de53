//go:build race

package ooo_test

// raceEnabled: the race detector is on. Two devices placing the same bytes
// into one buffer (a target with two adapters) are two goroutines writing
// it without an ordering the detector can see.
const raceEnabled = true
