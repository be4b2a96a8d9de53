package xfer

import (
	"context"
	"fmt"
)

// BenchParams describe a benchmark a client asks the server to take part in.
type BenchParams struct {
	Test  string `json:"test"`  // write, read, send, atomic, lat
	Size  int    `json:"size"`  // message size
	Iters int    `json:"iters"` // messages per queue pair
	QPs   int    `json:"qps"`
}

func (s *Server) serveBench(ctx context.Context, cancel context.CancelCauseFunc, c *ctrl, req *message) (Result, error) {
	return Result{}, refuse(c, fmt.Errorf("benchmarks are not implemented yet"))
}
