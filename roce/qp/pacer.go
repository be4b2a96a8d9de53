package qp

// pacer is the send window's rate limiter, DCQCN's reaction point
// (cc_dcqcn.go, docs/cc.md): a token bucket filled at the rate DCQCN sets,
// on the engine's clock. The window asks it in canSend (allow), reports
// each frame sent (charge), gives the engine its next release time in wake
// (release), and hands it the CNPs the completer receives (cnp). Off, or
// while DCQCN is not limiting the rate, it lets everything through and
// only measures. Nothing sleeps: a paced queue pair stops at reqWait and
// the device runs Progress again at the release time.
type pacer struct {
	on     bool
	cc     *dcqcn  // DCQCN's state while on (nil when off: a queue pair without DCQCN carries none)
	tokens float64 // bytes that may go now; negative: owed
	at     int64   // last refill
}

// pacerMinBurst is the smallest bucket (bytes): two frames of the largest
// MTU, so that a slow rate still sends whole frames without waiting twice.
const pacerMinBurst = 2 * 4200

// enable turns the pacer on (with DCQCN's parameters p) or off at now.
func (p *pacer) enable(on bool, params DCQCNParams, now int64) {
	*p = pacer{on: on}
	if on {
		p.cc = new(dcqcn)
		p.cc.init(params, now)
		p.at = now
	}
}

// refill adds the tokens of the time since the last refill at rate r
// (bytes/s), up to the bucket: BurstTime of the rate.
func (p *pacer) refill(now int64, r float64) {
	if now > p.at {
		burst := max(r*float64(p.cc.p.BurstTime)/1e9, pacerMinBurst)
		p.tokens = min(p.tokens+float64(now-p.at)*r/1e9, burst)
		p.at = now
	}
}

// allow reports whether a frame may go out at now.
func (p *pacer) allow(now int64) bool {
	if !p.on {
		return true
	}
	p.cc.tick(now)
	r, limited := p.cc.rate()
	if !limited {
		return true
	}
	p.refill(now, r)
	return p.tokens >= 0
}

// charge takes a frame of n bytes sent at now.
func (p *pacer) charge(n int, now int64) {
	if !p.on {
		return
	}
	if r, limited := p.cc.rate(); limited {
		p.refill(now, r)
		p.tokens -= float64(n)
	}
	p.cc.sent(n, now)
}

// release is when the bucket is out of debt (0: it is not, or not paced).
func (p *pacer) release() int64 {
	if !p.on {
		return 0
	}
	r, limited := p.cc.rate()
	if !limited || p.tokens >= 0 || r <= 0 {
		return 0
	}
	return p.at + int64(-p.tokens*1e9/r) + 1
}

// cnp handles a CNP received at now; it reports whether it cut the rate.
func (p *pacer) cnp(now int64) bool {
	was := p.cc.limited
	cut := p.cc.cnp(now)
	if cut && !was {
		p.tokens, p.at = 0, now
	}
	return cut
}
