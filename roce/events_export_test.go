package roce

// Raise raises ev as the engine and the interface watcher do (roce_test's
// allocation test).
func (d *Device) Raise(ev AsyncEvent) { d.events.raise(ev) }
