// Package reliability holds the tests and benchmarks that check xdproce's
// guarantees when the network and the peer misbehave: a hostile-peer fuzz
// target against a live device, rkey guessing, resource limits and memory
// returned after churn, peer death, real faults through the netlab impairment
// relay, and a bounded soak. It has no API; everything lives in its _test
// files (run `go test ./internal/reliability`, `-long` and `-soak=2m` for the
// long variants; privileged tests need root).
package reliability
