package roce

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/roce/qp"
)

// Third-party operations (docs/ooo.md, Third party). A controller posts a
// WROOO3PRead on its OOO queue pair connected to the data source: the
// source streams the region to the sink named in SendWR.Sink, and the
// sink's completion comes back to the controller (WCOOODelivered, on the
// queue pair that posted it, when Notify asks for it). The source and the
// sink act only for the controller their OOO queue pair is connected to;
// the source streams only to sinks admitted with AdmitSink.

// ThirdParty is the sink of a WROOO3PRead (SendWR.Sink): its GID, OOO queue
// pair and context, and where the bytes go there.
type ThirdParty = qp.ThirdParty

// WROOO3PRead is the third-party READ work request (its local completion is
// a WCOOORead).
const WROOO3PRead = qp.WROOO3PRead

// MaxOOOSinks bounds the sinks admitted on one queue pair.
const MaxOOOSinks = qp.MaxSinks

// AdmitSink lets this OOO queue pair (a data source, connected to the
// controller) stream third-party READ data to the OOO queue pair qpn at
// gid; its MAC is resolved now, as Connect does. Call it only for a sink
// the controller named over an authenticated control connection.
func (q *QP) AdmitSink(gid netip.Addr, qpn uint32) error {
	if q.typ != OOO {
		return fmt.Errorf("roce: admit sink on qp %#x: a %v queue pair", q.e.qpn, q.typ)
	}
	av, err := q.d.resolveAV(gid, netip.Addr{}, true)
	if err != nil {
		return fmt.Errorf("roce: admit sink on qp %#x: %w", q.e.qpn, err)
	}
	if err := q.q.AdmitSink(av, qpn); err != nil {
		return fmt.Errorf("roce: qp %#x: %w", q.e.qpn, err)
	}
	return nil
}

// RevokeSink withdraws a sink AdmitSink admitted (streams under way end).
func (q *QP) RevokeSink(gid netip.Addr, qpn uint32) {
	if q.q != nil {
		q.q.RevokeSink(gid, qpn)
	}
}
