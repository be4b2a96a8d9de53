package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/xdproce/xdproce/capture"
)

var dumpCommand = &Command{
	Name:       "dump",
	ShortUsage: "xdproce dump [--format text|json|json-line] [--json] [--verify] [--filter EXPR] FILE...",
	ShortHelp:  "print the RoCEv2 frames of pcap/pcapng captures, one line each",
	LongHelp: `Dump reads pcap or pcapng captures (from xdproce's own recorder, tcpdump,
Wireshark...) and prints one line per frame: frame number, time (UTC),
direction when the capture records it, source and destination IP:port, the
opcode, destination QPN, PSN, AckReq, the extension headers (RETH va/rkey/len,
AETH decoded as ACK, NAK with its reason or RNR with its timer, atomic
operands, DETH Q_Key and source QP, immediate data, invalidated R_Key), the
payload length (with the messages it recognises in it: the enlargement layer's
control messages, RDMA CM MADs on QP1 such as "CM REQ comm_id=... qpn=...") and
whether the ICRC is right. Frames that are not RoCEv2 get
a short line ("non-RoCE IPv4 TCP ...") unless a filter is given. "-" reads
standard input.

A file that is not a capture is an error whatever the flags.

FILTER
` + indent(capture.FilterHelp, "  ") + `

JSON FORMAT
  --format json prints one document {"schema": 1, "files": [{"file": NAME,
  "format": "pcap"|"pcapng", "frames": [RECORD...]}]}; --format json-line (and
  its alias --json) prints one RECORD per line, each with "schema" and "file"
  added. Field names are stable within schema 1 (see capture.Record):
  index, time, dir, len, orig_len, roce, summary, error, vlan_tci,
  ip_version, src, dst, bth {opcode, opcode_num, dest_qpn, psn, ack_req, se,
  mig_req, pad_count, pkey, fecn, becn}, deth {qkey, src_qpn}, reth {va,
  rkey, dma_len}, atomic_eth {va, rkey, swap_add, compare}, aeth {syndrome,
  type, value, meaning, msn}, atomic_ack_eth {orig}, imm_dt, ieth_rkey,
  payload_len, payload, payload_kind, icrc {value, want, ok}. 64-bit values are
  strings "0x...".

EXIT STATUS
  0 all files read; with --verify, also every RoCE frame decodes with a good
  ICRC. A file that ends inside a block (a capture still being written, or
  one cut short) is read up to its last whole frame, with a warning on
  stderr. --verify prints a summary line on stderr (frames, RoCE frames, bad
  ICRCs, frames that do not decode); when a frame is bad, that line is the
  error. 1 a file cannot be read or is not a capture, or --verify found a bad
  frame (the count goes to stderr). 2 a command-line mistake.

EXAMPLES
  xdproce dump trace.pcapng
  xdproce dump --filter 'qpn=0x11 and op=RC_RDMA_WRITE_*' trace.pcapng
  xdproce dump trace.pcapng --filter nak
  xdproce dump --verify testdata/pcaps/*.pcapng
  xdproce dump --json trace.pcapng | jq 'select(.aeth.type == "NAK")'`,
	Setup: setupDump,
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// formatFlag is --format, with --json as an alias for json-line.
type formatFlag string

func (f *formatFlag) String() string { return string(*f) }
func (f *formatFlag) Set(s string) error {
	switch s {
	case "text", "json", "json-line":
		*f = formatFlag(s)
		return nil
	}
	return fmt.Errorf("unknown format %q (want text, json or json-line)", s)
}

func setupDump(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	format := formatFlag("text")
	fs.Var(&format, "format", "output `format`: text, json (one document) or json-line (one record per line)")
	jsonFlag := fs.Bool("json", false, "same as --format json-line")
	verify := fs.Bool("verify", false, "exit 1 if any RoCE frame does not decode or has a bad ICRC")
	filter := fs.String("filter", "", "print only frames matching `EXPR` (see FILTER)")
	return func(ctx context.Context, args []string) error {
		if *jsonFlag {
			format = "json-line"
		}
		if len(args) == 0 {
			return usageErrorf("xdproce dump", "no capture file given")
		}
		flt, err := capture.ParseFilter(*filter)
		if err != nil {
			return &UsageError{Cmd: "xdproce dump", Msg: err.Error()}
		}
		d := &dumper{env: env, format: string(format), filter: flt, out: bufio.NewWriter(env.Stdout)}
		err = d.run(ctx, args)
		if ferr := d.out.Flush(); err == nil && ferr != nil {
			err = fmt.Errorf("dump: write output: %w", ferr)
		}
		if err != nil {
			return err
		}
		if *verify {
			// One line either way: the summary, or the error that holds it.
			sum := fmt.Sprintf("%d frames, %d RoCE frames, %d with a bad ICRC, %d that do not decode",
				d.frames, d.roce, d.badICRC, d.bad-d.badICRC)
			if d.truncated > 0 {
				sum += fmt.Sprintf(" (%d of %d files truncated)", d.truncated, len(args))
			}
			if d.bad > 0 {
				return fmt.Errorf("dump: verify: %s; first bad: %s frame %d", sum, d.firstBadFile, d.firstBadFrame)
			}
			fmt.Fprintf(env.Stderr, "verify: %s\n", sum)
		}
		env.Log.Info("dump done", "files", len(args), "frames", d.frames, "roce", d.roce, "bad", d.bad)
		return nil
	}
}

type dumper struct {
	env    *Env
	format string
	filter *capture.Filter
	out    *bufio.Writer

	multi bool // several files: prefix text lines with the file name

	frames, roce, bad, badICRC int
	truncated                  int // files that end inside a block
	firstBadFile               string
	firstBadFrame              int
}

// jsonLine is one record of --format json-line.
type jsonLine struct {
	Schema int    `json:"schema"`
	File   string `json:"file"`
	*capture.Record
}

func (d *dumper) run(ctx context.Context, files []string) error {
	d.multi = len(files) > 1
	if d.format == "json" {
		d.out.WriteString(`{"schema":` + strconv.Itoa(capture.SchemaVersion) + `,"files":[`)
	}
	for i, name := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := d.file(ctx, i, name); err != nil {
			return err
		}
	}
	if d.format == "json" {
		d.out.WriteString("]}\n")
	}
	return nil
}

func (d *dumper) file(ctx context.Context, i int, name string) error {
	var in io.Reader
	if name == "-" {
		in = os.Stdin
	} else {
		fh, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("dump: %w", err)
		}
		defer fh.Close()
		in = fh
	}
	r, err := capture.NewReader(in)
	if err != nil {
		return fmt.Errorf("dump: %s: %w", name, err)
	}
	d.env.Log.Debug("reading", "file", name, "format", r.Format())
	enc := json.NewEncoder(d.out)
	if d.format == "json" {
		if i > 0 {
			d.out.WriteByte(',')
		}
		hdr, _ := json.Marshal(struct {
			File   string `json:"file"`
			Format string `json:"format"`
		}{name, r.Format().String()})
		d.out.Write(hdr[:len(hdr)-1])
		d.out.WriteString(`,"frames":[`)
	}
	var f capture.Frame
	n := 0
	first := d.frames
	var line []byte
	for {
		err := r.Next(&f)
		if err == io.EOF {
			break
		}
		if errors.Is(err, capture.ErrTruncated) {
			// A capture still being written (serve flushes it after each
			// request), or one cut short: what came before is whole.
			d.truncated++
			fmt.Fprintf(d.env.Stderr, "dump: warning: %s ends inside a block after %d complete frames (still being written, or cut short); the rest is ignored\n", name, d.frames-first)
			break
		}
		if err != nil {
			return fmt.Errorf("dump: %s: %w", name, err)
		}
		if f.Index%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rec := capture.Describe(&f)
		d.frames++
		if rec.RoCE {
			d.roce++
			if rec.Bad() {
				if d.bad == 0 {
					d.firstBadFile, d.firstBadFrame = name, rec.Index
				}
				d.bad++
				if rec.ICRC != nil && !rec.ICRC.OK && rec.Error == "" {
					d.badICRC++
				}
				d.env.Log.Info("bad RoCE frame", "file", name, "frame", rec.Index, "error", rec.Error)
			}
		}
		if !d.filter.Match(rec) {
			continue
		}
		switch d.format {
		case "text":
			line = rec.AppendText(line[:0])
			if d.multi {
				d.out.WriteString(name)
				d.out.WriteString(": ")
			}
			d.out.Write(line)
			d.out.WriteByte('\n')
		case "json-line":
			if err := enc.Encode(jsonLine{Schema: capture.SchemaVersion, File: name, Record: rec}); err != nil {
				return fmt.Errorf("dump: encode: %w", err)
			}
		case "json":
			if n > 0 {
				d.out.WriteByte(',')
			}
			b, err := json.Marshal(rec)
			if err != nil {
				return fmt.Errorf("dump: encode: %w", err)
			}
			d.out.Write(b)
		}
		n++
	}
	if d.format == "json" {
		d.out.WriteString("]}")
	}
	return nil
}
