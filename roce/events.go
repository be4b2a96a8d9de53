package roce

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/qp"
)

// AsyncEventType is the kind of an asynchronous event. The values are
// libibverbs' enum ibv_event_type.
type AsyncEventType int

// Asynchronous events (ibv_get_async_event).
const (
	// EventQPFatal: the engine moved a queue pair to the error state by
	// itself (retries or RNR retries exhausted, a fatal NAK received, a
	// request the responder refused: IBA 10.3.1), not because Modify asked.
	// Its outstanding work requests complete with an error or WR_FLUSH_ERR.
	EventQPFatal AsyncEventType = 1 // IBV_EVENT_QP_FATAL
	// EventCommEstablished: the first packet arrived on a queue pair in RTR
	// (IBA 11.6.3: the application may move it to RTS without waiting for
	// the connection manager's RTU). A queue pair already in RTS when its
	// first packet comes raises none; one reset and brought to RTR again
	// raises it again.
	EventCommEstablished AsyncEventType = 4 // IBV_EVENT_COMM_EST
	// EventPortActive: the port became active (the interface is up and
	// has carrier).
	EventPortActive AsyncEventType = 9 // IBV_EVENT_PORT_ACTIVE
	// EventPortError: the port went down (the interface was set down or
	// lost carrier).
	EventPortError AsyncEventType = 10 // IBV_EVENT_PORT_ERR
	// EventSRQLimitReached: a queue pair took a WQE from a shared receive
	// queue and fewer than its armed limit remain (SRQ.ModifyLimit); the
	// limit is disarmed, so it fires once per arming.
	EventSRQLimitReached AsyncEventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
	// EventQPLastWQEReached: a queue pair on a shared receive queue entered
	// the error state and will take no more of its WQEs (the one it held,
	// if any, completed with WR_FLUSH_ERR); once per entry into Error.
	EventQPLastWQEReached AsyncEventType = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
	// EventGIDChange: the GID table changed (an address of the interface
	// was added or removed); Device.GIDs has the new table.
	EventGIDChange AsyncEventType = 18 // IBV_EVENT_GID_CHANGE
)

var asyncEventNames = map[int]string{1: "QP_FATAL", 4: "COMM_EST", 9: "PORT_ACTIVE", 10: "PORT_ERR",
	15: "SRQ_LIMIT_REACHED", 16: "QP_LAST_WQE_REACHED", 18: "GID_CHANGE"}

func (t AsyncEventType) String() string { return enumName(asyncEventNames, int(t), "AsyncEventType") }

// An AsyncEvent is one asynchronous event of a Device.
type AsyncEvent struct {
	Type AsyncEventType
	// QPN is the queue pair of EventQPFatal, EventCommEstablished and
	// EventQPLastWQEReached (0 for the others).
	QPN uint32
	// Port is the port of EventPortActive, EventPortError and
	// EventGIDChange: always 1 (0 for the others).
	Port int
	// SRQ is the shared receive queue of EventSRQLimitReached (nil for the
	// others).
	SRQ *SRQ
}

func (ev AsyncEvent) String() string {
	switch {
	case ev.QPN != 0:
		return ev.Type.String() + " qp " + strconv.FormatUint(uint64(ev.QPN), 10)
	case ev.Port != 0:
		return ev.Type.String() + " port " + strconv.Itoa(ev.Port)
	}
	return ev.Type.String()
}

// AsyncEventQueueLen is the number of events a Device keeps for the
// application; more are dropped and counted (AsyncEventsDropped).
const AsyncEventQueueLen = 256

// asyncQueue holds a device's events. Raising never blocks and never
// allocates: an event that finds the queue full is dropped and counted.
type asyncQueue struct {
	ch      chan AsyncEvent
	dropped atomic.Uint64
	mu      sync.Mutex // raise vs close
	closed  bool
}

func (a *asyncQueue) init() { a.ch = make(chan AsyncEvent, AsyncEventQueueLen) }

func (a *asyncQueue) raise(ev AsyncEvent) {
	a.mu.Lock()
	if !a.closed {
		select {
		case a.ch <- ev:
		default:
			a.dropped.Add(1)
		}
	}
	a.mu.Unlock()
}

// close ends the channel: readers get the events queued, then see it closed.
func (a *asyncQueue) close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.ch)
	}
	a.mu.Unlock()
}

// AsyncEvents returns the channel the device's asynchronous events arrive
// on, as ibv_get_async_event returns them: queue pair errors and
// communication established from the engine, port state and GID table
// changes from the interface (devices made by Open; a NewDevice's port is
// always active and its GID table fixed). It holds AsyncEventQueueLen events;
// when the application does not read them, later ones are dropped and
// counted (AsyncEventsDropped), and the engine never waits. The channel is
// closed when the device closes. Events need no acknowledgement.
func (d *Device) AsyncEvents() <-chan AsyncEvent { return d.events.ch }

// GetAsyncEvent waits for the next asynchronous event (ibv_get_async_event).
// It returns ctx's error when ctx ends first, ErrClosed once the device is
// closed and its events have been read.
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	select {
	case ev, ok := <-d.events.ch:
		if !ok {
			return AsyncEvent{}, ErrClosed
		}
		return ev, nil
	case <-ctx.Done():
		return AsyncEvent{}, ctx.Err()
	}
}

// AsyncEventsDropped counts the events dropped because the queue was full.
func (d *Device) AsyncEventsDropped() uint64 { return d.events.dropped.Load() }

// qpEvents raises the events of a queue pair the engine just ran: QP fatal
// when the engine failed it, communication established when it received
// its first packet in RTR (received says it did). The engine calls it; it
// allocates nothing.
func (e *engine) qpEvents(q *qpEntry, received bool) {
	st := q.q.EngineState()
	if f := q.q.Failures(); f != q.failures {
		q.failures = f
		q.q.PlaceRevoke(&e.tx) // roce/qp place_grant.go: the daemon places nothing more for it
		e.d.events.raise(AsyncEvent{Type: EventQPFatal, QPN: q.qpn})
	}
	if n := q.q.LastWQEReached(); n != q.lastWQE {
		q.lastWQE = n
		e.d.events.raise(AsyncEvent{Type: EventQPLastWQEReached, QPN: q.qpn})
	}
	if r := q.q.Resets(); r != q.resets {
		q.resets = r
		q.commEst = false // reset since: armed again
	}
	switch {
	case st < qp.RTR:
		q.commEst = false // not connected yet: armed
	case q.commEst:
	case st == qp.RTR && received:
		q.commEst = true
		e.d.events.raise(AsyncEvent{Type: EventCommEstablished, QPN: q.qpn})
	case st != qp.RTR:
		q.commEst = true // past RTR without a packet in it: nothing to raise
	}
}
