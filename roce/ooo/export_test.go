package ooo

// Estimator is the writer's loss estimate, for tests.
type Estimator struct{ e lossEstimate }

// NewEstimator starts an estimate at initial.
func NewEstimator(initial float64) *Estimator { return &Estimator{newLossEstimate(initial)} }

// Add records the outcome of an operation of n packets.
func (x *Estimator) Add(n int, ok bool) { x.e.add(n, ok) }

// Amend turns the latest failure of n packets into a success.
func (x *Estimator) Amend(n int) bool { return x.e.amend(n) }

// Loss is the current estimate.
func (x *Estimator) Loss() float64 { return x.e.loss() }

// EstWindow is the number of operations the estimate weighs.
const EstWindow = estWindow
