package roce

import "time"

// Hooks for roce_test's RegCache tests.

// NewRegCacheClock returns a RegCache on the clock now, with no timer: the
// test moves the clock and calls Sweep, Get or release to expire regions.
func NewRegCacheClock(p *PD, cfg RegCacheConfig, now func() time.Duration) (*RegCache, error) {
	return p.newRegCache(cfg, now, false)
}

// Registered reports whether m's keys are still in its device's table.
func (c *RegCache) Registered(m *MR) bool {
	_, err := c.pd.d.tbl.Local(c.pd.pd, m.LKey(), m.Addr(), 0, 0)
	return err == nil
}
