//go:build !race

package roce_test

const raceEnabled = false
