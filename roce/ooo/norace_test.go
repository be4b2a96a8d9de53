//go:build !race

package ooo_test

const raceEnabled = false
