package qp

// EngineState returns the state the engine works in: the one Modify asked
// for once Receive or Progress has applied it, or Error as soon as the engine
// failed the queue pair. Only the progress goroutine may call it (it takes no
// lock); the device uses it to raise asynchronous events.
func (q *QP) EngineState() State { return q.e.state }

// Failures counts the times the engine moved the queue pair to Error by
// itself (retries exhausted, a fatal NAK, a responder error: IBA 10.3.1),
// not because Modify asked. Only the progress goroutine may call it; the
// device raises a QP-fatal asynchronous event when it grows.
func (q *QP) Failures() uint32 { return q.e.failures }

// Resets counts the times the engine applied a reset (Modify to RESET). Only
// the progress goroutine may call it; the device re-arms its
// communication-established event when it grows.
func (q *QP) Resets() uint32 { return q.e.resets }
