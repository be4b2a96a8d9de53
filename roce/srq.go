package roce

import (
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/roce/qp"
)

// MaxSRQ bounds the shared receive queues of a device (DeviceAttr.MaxSRQ).
const MaxSRQ = qp.MaxSRQ

// ErrSRQBusy: DestroySRQ while queue pairs still receive on it (ibverbs'
// EBUSY).
var ErrSRQBusy = qp.ErrSRQBusy

// SRQConfig describes a shared receive queue (ibv_srq_init_attr).
type SRQConfig struct {
	MaxWR  int // outstanding receive WRs (0: DefaultMaxWR; at most MaxWR)
	MaxSGE int // SGEs per WR (0: DefaultMaxSGE; at most MaxSGE)
	// Limit arms the SRQ-limit event at creation (0: not armed).
	Limit int
}

// An SRQ is a shared receive queue: the receive work requests of every RC or
// UD queue pair created on it (QPConfig.SRQ). Its methods may be called from
// any goroutine.
type SRQ struct {
	d *Device
	s *qp.SRQ
}

// CreateSRQ makes a shared receive queue of the PD (ibv_create_srq).
func (p *PD) CreateSRQ(cfg SRQConfig) (*SRQ, error) {
	d := p.d
	if d.isClosed() {
		return nil, fmt.Errorf("roce: create srq: %w", d.closedErr())
	}
	if n := d.srqs.Add(1); n > MaxSRQ {
		d.srqs.Add(-1)
		return nil, fmt.Errorf("roce: create srq: %d shared receive queues already: %w", MaxSRQ, ErrLimit)
	}
	s, err := qp.NewSRQ(qp.SRQConfig{PD: p.pd, MaxWR: cfg.MaxWR, MaxSGE: cfg.MaxSGE, Limit: cfg.Limit})
	if err != nil {
		d.srqs.Add(-1)
		return nil, fmt.Errorf("roce: create srq: %w", err)
	}
	x := &SRQ{d: d, s: s}
	s.SetLimitHandler(func() { d.events.raise(AsyncEvent{Type: EventSRQLimitReached, SRQ: x}) })
	return x, nil
}

// PostRecv posts a receive work request (the SRQ copies it); it fails with
// ErrQueueFull when MaxWR are outstanding.
func (s *SRQ) PostRecv(wr RecvWR) error {
	if err := s.s.PostRecv(&wr); err != nil {
		return fmt.Errorf("roce: %w", err)
	}
	return nil
}

// ModifyLimit arms the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT): when a
// queue pair takes a WQE and fewer than limit remain, one
// EventSRQLimitReached naming this SRQ is raised and the limit is disarmed.
// 0 disarms it.
func (s *SRQ) ModifyLimit(limit int) error {
	if err := s.s.ModifyLimit(limit); err != nil {
		return fmt.Errorf("roce: %w", err)
	}
	return nil
}

// Limit is the armed limit (0: not armed) and Outstanding the work requests
// posted and not yet taken by a queue pair (ibv_query_srq).
func (s *SRQ) Limit() int       { return s.s.Limit() }
func (s *SRQ) Outstanding() int { return s.s.Outstanding() }

// MaxWR and MaxSGE are the capacities it was created with.
func (s *SRQ) MaxWR() int  { return s.s.MaxWR() }
func (s *SRQ) MaxSGE() int { return s.s.MaxSGE() }

// Destroy frees the SRQ (ibv_destroy_srq). It fails with ErrSRQBusy while
// queue pairs created on it exist (destroy them first); work requests still
// posted are dropped without completions, as ibverbs does.
func (s *SRQ) Destroy() error {
	if err := s.s.Destroy(); err != nil {
		return fmt.Errorf("roce: %w", err)
	}
	s.d.srqs.Add(-1)
	return nil
}

// srqOf returns the engine SRQ of cfg (nil: none), checking its device.
func (d *Device) srqOf(s *SRQ) (*qp.SRQ, error) {
	if s == nil {
		return nil, nil
	}
	if s.d != d {
		return nil, errors.New("the shared receive queue belongs to another device")
	}
	return s.s, nil
}
