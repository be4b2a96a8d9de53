// Package lmrm is a locally managed remote memory (LMRM) pool over one RC
// queue pair: a requester asks a provider once for an amount of memory, the
// provider answers with a memory range of many equal slots (address, rkey,
// slot size, count), and the requester keeps the metadata of those slots
// locally. Each message reserves a slot locally and goes to the provider
// as one RDMA WRITE WITH IMMEDIATE, the immediate naming pool and slot:
// there is no control traffic per message.
//
// The provider gives slots back in batches: when a pool's batch of consumed
// slots is full (by default a quarter of the pool), it sends LMRM_RELEASE
// listing them. When every slot is reserved or in flight, Reserve returns
// ErrExhausted, or, with Config.Grow, sends exactly one more LMRM_ALLOC and
// returns ErrPending until the answer comes. The provider can revoke a pool
// (LMRM_REVOKE, then it deregisters the memory): a later write into it
// completes with a remote access error and the requester reports
// ErrRevoked.
//
// The control messages (LMRM_ALLOC, LMRM_ALLOC_ACK, LMRM_RELEASE,
// LMRM_REVOKE) are SENDs on the same queue pair; msg.go gives their layout,
// and the package registers a capture describer so that `xdproce dump`
// names them.
//
// Nothing runs between calls: both ends move only in Progress, which polls
// the completion queue the queue pair's sends and receives complete on
// (the package uses it alone).
//
//	r, _ := lmrm.NewRequester(qp, pd, cq, &lmrm.Config{Grow: true})
//	r.Alloc(1<<20, 4096)     // one LMRM_ALLOC
//	for r.Stats().Pools == 0 { r.Progress() }
//	s, err := r.Reserve()    // local: no traffic
//	err = r.Write(s, msg)    // one WRITE WITH IMMEDIATE
//
//	p, _ := lmrm.NewProvider(qp, pd, cq, nil, func(pool uint8, slot uint32, b []byte) { … })
//	for { p.Progress() }
package lmrm
