package qp

import (
	"errors"
	"fmt"
	"math"
)

// DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
// SIGCOMM 2015), the reaction point: a queue pair's sending rate, cut when
// a CNP comes back and recovered in stages. docs/cc.md gives the rules, the
// defaults and their sources. Everything runs on the engine's clock (ns,
// passed in): the periodic events of the algorithm (α's decay, the rate
// increase timer) are counted when the state is next touched rather than
// fired by a timer, so they keep their period whatever the machine's timer
// granularity.

// DCQCNParams are the parameters of DCQCN, named after the ConnectX
// firmware's (mlxconfig / mlx5 PRM cong_control_r_roce_ecn_rp and _np).
// The zero value of a field means its default (DefaultDCQCN).
type DCQCNParams struct {
	// Reaction point (the sender).
	TimeReset       int64 // ns between rate increase timer events (RPG_TIME_RESET)
	ByteReset       int64 // bytes sent per byte counter event (RPG_BYTE_RESET)
	Threshold       int   // events of each kind before additive, then hyper increase (RPG_THRESHOLD)
	AIRate          int64 // additive increase, bit/s (RPG_AI_RATE)
	HAIRate         int64 // hyper increase, bit/s (RPG_HAI_RATE)
	MinDecFac       int   // the largest cut one CNP makes, percent (RPG_MIN_DEC_FAC)
	MinRate         int64 // bit/s (RPG_MIN_RATE)
	MaxRate         int64 // bit/s; 0: the rate the queue pair reached before its first cut (RPG_MAX_RATE 0: line rate)
	G               int   // α decays by G/1024 per AlphaPeriod (DCE_TCP_G)
	AlphaPeriod     int64 // ns (DCE_TCP_RTT; scaled, docs/cc.md)
	InitialAlpha    int   // α before the first CNP, in 1/1024 (INITIAL_ALPHA_VALUE)
	ReducePeriod    int64 // ns: at most one cut per period (RATE_REDUCE_MONITOR_PERIOD)
	BurstTime       int64 // ns of the current rate the pacer may send at once (no ConnectX equivalent; docs/cc.md)
	CNPInterval     int64 // notification point: at most one CNP per queue pair per interval, ns (MIN_TIME_BETWEEN_CNPS; scaled)
	CNPDSCP         uint8 // DSCP of the CNPs sent (CNP_DSCP)
	FirstMeasureGap int64 // ns: the rate measurement window while unpaced (no ConnectX equivalent)
}

// DefaultDCQCN holds the defaults: ConnectX's where they work on the
// engine's clock, scaled where a microsecond period cannot (docs/cc.md).
var DefaultDCQCN = DCQCNParams{
	TimeReset:       300_000,
	ByteReset:       32767,
	Threshold:       1,
	AIRate:          5_000_000,
	HAIRate:         50_000_000,
	MinDecFac:       50,
	MinRate:         1_000_000,
	G:               1019,
	AlphaPeriod:     100_000, // ConnectX: 1 µs; scaled (docs/cc.md)
	InitialAlpha:    1023,
	ReducePeriod:    4_000,
	BurstTime:       500_000,
	CNPInterval:     100_000, // ConnectX: 4 µs; scaled (docs/cc.md)
	CNPDSCP:         48,
	FirstMeasureGap: 1_000_000,
}

// check reports a parameter out of range (zero means the default).
func (p *DCQCNParams) check() error {
	for _, v := range [...]int64{p.TimeReset, p.ByteReset, p.AIRate, p.HAIRate, p.MinRate, p.MaxRate,
		p.AlphaPeriod, p.ReducePeriod, p.BurstTime, p.CNPInterval, p.FirstMeasureGap,
		int64(p.Threshold), int64(p.MinDecFac), int64(p.G), int64(p.InitialAlpha)} {
		if v < 0 {
			return errors.New("dcqcn: negative parameter")
		}
	}
	switch {
	case p.MinDecFac > 100:
		return fmt.Errorf("dcqcn: MinDecFac %d%% over 100", p.MinDecFac)
	case p.G > 1024 || p.InitialAlpha > 1024:
		return fmt.Errorf("dcqcn: G %d or InitialAlpha %d over 1024", p.G, p.InitialAlpha)
	case p.CNPDSCP > 63:
		return fmt.Errorf("dcqcn: CNP DSCP %d over 63", p.CNPDSCP)
	case p.MaxRate != 0 && p.MaxRate < p.withDefaults().MinRate:
		return fmt.Errorf("dcqcn: MaxRate %d below MinRate", p.MaxRate)
	}
	return nil
}

// withDefaults returns p with zero fields set from DefaultDCQCN.
func (p DCQCNParams) withDefaults() DCQCNParams {
	d := DefaultDCQCN
	set := func(v *int64, def int64) {
		if *v == 0 {
			*v = def
		}
	}
	set(&p.TimeReset, d.TimeReset)
	set(&p.ByteReset, d.ByteReset)
	set(&p.AIRate, d.AIRate)
	set(&p.HAIRate, d.HAIRate)
	set(&p.MinRate, d.MinRate)
	set(&p.AlphaPeriod, d.AlphaPeriod)
	set(&p.ReducePeriod, d.ReducePeriod)
	set(&p.BurstTime, d.BurstTime)
	set(&p.CNPInterval, d.CNPInterval)
	set(&p.FirstMeasureGap, d.FirstMeasureGap)
	if p.Threshold == 0 {
		p.Threshold = d.Threshold
	}
	if p.MinDecFac == 0 {
		p.MinDecFac = d.MinDecFac
	}
	if p.G == 0 {
		p.G = d.G
	}
	if p.InitialAlpha == 0 {
		p.InitialAlpha = d.InitialAlpha
	}
	if p.CNPDSCP == 0 {
		p.CNPDSCP = d.CNPDSCP
	}
	return p
}

// dcqcn is the reaction point's rate state. While unlimited the queue
// pair is not paced and its sending rate is measured; the first CNP starts
// pacing from that rate.
type dcqcn struct {
	p       DCQCNParams
	limited bool    // pacing at rc
	rc, rt  float64 // current and target rate, bytes/s
	maxRate float64 // bytes/s: the rate at which pacing stops
	alpha   float64
	alphaAt int64 // start of the α period under way
	cutAt   int64 // last cut (0: none)
	timerAt int64 // start of the rate increase timer period under way
	bytes   int64 // bytes towards the next byte counter event
	iT, iB  int   // timer and byte counter events since the last cut

	measAt    int64   // unlimited: start of the measurement window
	measBytes int64   // bytes sent in it
	measured  float64 // the last window's rate, bytes/s (0: none yet)
	peak      float64 // the highest measured
}

func (d *dcqcn) init(p DCQCNParams, now int64) {
	*d = dcqcn{p: p.withDefaults(), measAt: now, alphaAt: now}
	d.alpha = float64(d.p.InitialAlpha) / 1024
}

// bps converts bit/s to bytes/s.
func bps(v int64) float64 { return float64(v) / 8 }

// rate returns the current rate in bytes/s and whether the queue pair is
// paced at it.
func (d *dcqcn) rate() (float64, bool) { return d.rc, d.limited }

// decay applies α's decay for the whole periods up to now.
func (d *dcqcn) decay(now int64) {
	if n := (now - d.alphaAt) / d.p.AlphaPeriod; n > 0 {
		d.alpha *= math.Pow(float64(d.p.G)/1024, float64(n))
		d.alphaAt += n * d.p.AlphaPeriod
	}
}

// cnp handles a CNP received at now; it reports whether it cut the rate
// (false: within ReducePeriod of the last cut).
func (d *dcqcn) cnp(now int64) bool {
	if d.limited {
		d.decay(now)
	} else { // the flow's first CNP (since it last ran unpaced)
		d.alpha, d.alphaAt = float64(d.p.InitialAlpha)/1024, now
	}
	g := 1 - float64(d.p.G)/1024
	d.alpha = (1-g)*d.alpha + g
	d.alphaAt = now
	if d.cutAt != 0 && now-d.cutAt < d.p.ReducePeriod {
		return false
	}
	if !d.limited {
		d.start(now)
	}
	d.rt = d.rc
	cut := min(d.alpha/2, float64(d.p.MinDecFac)/100)
	d.rc = max(d.rc*(1-cut), bps(d.p.MinRate))
	d.cutAt, d.timerAt = now, now
	d.iT, d.iB, d.bytes = 0, 0, 0
	return true
}

// start begins pacing at the rate measured so far (bytes/s), which also
// becomes the rate at which pacing ends unless MaxRate sets it.
func (d *dcqcn) start(now int64) {
	r := d.measured
	if el := now - d.measAt; el > 0 && d.measBytes > 0 {
		r = max(r, float64(d.measBytes)*1e9/float64(el))
	}
	d.peak = max(d.peak, r)
	d.maxRate = d.peak
	if d.p.MaxRate > 0 {
		d.maxRate = bps(d.p.MaxRate)
		r = min(r, d.maxRate)
	}
	if r == 0 { // nothing sent yet: start from the most allowed
		r = d.maxRate
	}
	if d.maxRate == 0 {
		r, d.maxRate = bps(d.p.MinRate), bps(d.p.MinRate)
	}
	d.rc, d.limited = max(r, bps(d.p.MinRate)), true
}

// tick counts the rate increase timer events up to now.
func (d *dcqcn) tick(now int64) {
	if !d.limited {
		return
	}
	for k := 0; now-d.timerAt >= d.p.TimeReset && d.limited; k++ {
		if k == maxTicks { // idle far longer than any recovery takes
			d.unlimit(now)
			return
		}
		d.timerAt += d.p.TimeReset
		d.increase(now)
		d.iT++
	}
}

// maxTicks bounds the timer events tick counts at once: a recovery from
// the minimum rate to 100 Gb/s by additive increase alone takes fewer.
const maxTicks = 1 << 15

// sent charges n bytes sent at now: the byte counter while paced, the rate
// measurement while not.
func (d *dcqcn) sent(n int, now int64) {
	if !d.limited {
		d.measBytes += int64(n)
		if el := now - d.measAt; el >= d.p.FirstMeasureGap {
			d.measured = float64(d.measBytes) * 1e9 / float64(el)
			d.peak = max(d.peak, d.measured)
			d.measAt, d.measBytes = now, 0
		}
		return
	}
	d.bytes += int64(n)
	for d.bytes >= d.p.ByteReset && d.limited {
		d.bytes -= d.p.ByteReset
		d.increase(now)
		d.iB++
	}
}

// increase is one rate increase event (the timer's or the byte
// counter's; the caller counts it after): fast recovery while both counts
// of earlier events since the last cut are below Threshold, additive
// increase of the target while one is, hyper increase (by i·HAIRate, i
// counting up) once both reached it; the current rate moves halfway to the
// target each time. At the maximum rate pacing stops (and measuring starts
// again).
func (d *dcqcn) increase(now int64) {
	f := d.p.Threshold
	switch {
	case max(d.iT, d.iB) < f: // fast recovery
	case min(d.iT, d.iB) < f:
		d.rt += bps(d.p.AIRate)
	default:
		d.rt += float64(min(d.iT, d.iB)-f+1) * bps(d.p.HAIRate)
	}
	d.rt = min(d.rt, d.maxRate)
	d.rc = (d.rt + d.rc) / 2
	if d.rc >= d.maxRate*0.999 {
		d.unlimit(now)
	}
}

// unlimit stops pacing at now (the rate is back at its maximum) and starts
// measuring again; α and the last cut stay.
func (d *dcqcn) unlimit(now int64) {
	d.limited, d.rc = false, d.maxRate
	d.measAt, d.measBytes, d.measured = now, 0, 0
}
