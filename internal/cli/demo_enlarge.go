package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/internal/xfer"
)

// how names the demo's way of moving the data.
func (d *demo) how() string {
	if d.enlarge {
		return "through an enlargement channel"
	}
	return "by RDMA WRITE"
}

// promotions prints the promotions of a demo run with --enlarge: every
// ENLARGE_REQ and ENLARGE_ACK of the capture (the sender's: requests go out,
// acks come in) as 'xdproce dump' describes them, then the phase the channel
// reached. A run that climbed without a request and ack in the capture fails.
func (d *demo) promotions(e *xfer.EnlargeResult) error {
	if e == nil {
		return errors.New("demo: the sender reports no enlargement channel")
	}
	f, err := os.Open(d.capPath)
	if err != nil {
		return fmt.Errorf("demo: capture: %w", err)
	}
	defer f.Close()
	r, err := capture.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return fmt.Errorf("demo: capture: %w", err)
	}
	var fr capture.Frame
	reqs, acks := 0, 0
	// A control message is never sent twice by the channel, so a second
	// frame with the same direction and record is RC's retransmission of
	// the first (its ACK was late): shown, not counted.
	seen := make(map[string]bool)
	for i := 1; ; i++ {
		if err := r.Next(&fr); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("demo: capture: %w", err)
		}
		fr.Index = i
		rec := capture.Describe(&fr)
		isReq := strings.HasPrefix(rec.Payload, "ENLARGE_REQ")
		if !isReq && !strings.HasPrefix(rec.Payload, "ENLARGE_ACK") {
			continue
		}
		key := rec.Dir + " " + rec.Payload
		if seen[key] {
			d.say("retransmitted: frame %d %s %s", rec.Index, rec.Dir, rec.Payload)
			continue
		}
		seen[key] = true
		if isReq {
			reqs++
		} else {
			acks++
		}
		d.say("promotion: frame %d %s %s", rec.Index, rec.Dir, rec.Payload)
	}
	if reqs != e.Promotions || acks != e.Promotions {
		return fmt.Errorf("demo: the sender reports %d promotions, the capture holds %d ENLARGE_REQs and %d ENLARGE_ACKs", e.Promotions, reqs, acks)
	}
	d.say("enlarge: phase %d (%d B slots) after %d promotions, %d messages, %d B registered by the sender", e.Phase, e.SlotSize, e.Promotions, e.Messages, e.Registered)
	return nil
}
