package xfer

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Parts of files and coded refusals.
//
// A get request may carry a Span (the server announces cm.CapRange, and a
// client that sends one requires it in the hello, so that an older server
// refuses in the hello instead of sending the whole file): From is the
// first byte, or, when negative, -From is a number of bytes at the end of
// the file (the whole file when it is shorter); Count is the bytes wanted
// from there, 0 meaning to the end, and is cut at the end of the file. The
// server resolves it against the file's size and answers with the resolved
// Span (From ≥ 0, Count the bytes that follow, Total the file's size) in
// the accept, whose Size is Count; the transfer is then the usual one of
// Size bytes, its SHA-256 that of the part. A From ≥ 0 at or past the end
// of the file (any From ≥ 0 of an empty file, as in RFC 9110 §14.1.1) is
// not satisfiable: the server refuses with the code "range" and the file's
// size in the error message's Span.Total.
//
// Error messages carry a Code when the server knows the kind of refusal:
// "not_found" (no such file), "exists" (a put of an existing name that may
// not be replaced) and "range". RemoteError.Is maps them to fs.ErrNotExist,
// ErrExists and ErrRange. Servers before codes send none; clients treat
// that as an unclassified refusal.

// A Span is part of a file (see above).
type Span struct {
	From  int64 `json:"from,omitempty"`
	Count int64 `json:"count,omitempty"`
	Total int64 `json:"total,omitempty"`
}

// ErrRange: the span asked for lies outside the file (RemoteError.Size is
// the file's size).
var ErrRange = errors.New("range not satisfiable")

// Error codes of error messages.
const (
	codeNotFound = "not_found"
	codeExists   = "exists"
	codeRange    = "range"
)

// resolve returns the span sp asks for in a file of size bytes, or a
// rangeError.
func (sp Span) resolve(size int64) (Span, error) {
	from, count := sp.From, sp.Count
	if count < 0 {
		return Span{}, fmt.Errorf("span of %d bytes", count)
	}
	if from < 0 {
		from = max(size+from, 0)
	} else if from >= size {
		return Span{}, &rangeError{from: from, size: size}
	}
	if count == 0 || count > size-from {
		count = size - from
	}
	return Span{From: from, Count: count, Total: size}, nil
}

// applySpan resolves a get request's span (if any) against the file f of
// size bytes, recording it in the request, and positions f at its start. It
// returns the bytes to send.
func applySpan(f *os.File, size int64, req *message) (int64, error) {
	if req.Span == nil {
		return size, nil
	}
	sp, err := req.Span.resolve(size)
	if err != nil {
		return 0, err
	}
	if _, err := f.Seek(sp.From, io.SeekStart); err != nil {
		return 0, fmt.Errorf("seek %q to %d: %w", req.Name, sp.From, err)
	}
	req.Span = &sp
	return sp.Count, nil
}

type rangeError struct{ from, size int64 }

func (e *rangeError) Error() string {
	return fmt.Sprintf("range from byte %d: the file has %d bytes", e.from, e.size)
}

func (e *rangeError) Is(target error) bool { return target == ErrRange }

// notFound is a missing file, with the server's wording.
type notFound struct{ name string }

func noFile(name string) error           { return &notFound{name} }
func (e *notFound) Error() string        { return fmt.Sprintf("no file %q", e.name) }
func (e *notFound) Is(target error) bool { return target == fs.ErrNotExist }

// errorMessage is the error message refusing a request for err, with its
// code when err is of a kind clients tell apart.
func errorMessage(err error) *message {
	m := &message{Type: msgError, Error: err.Error()}
	var re *rangeError
	switch {
	case errors.As(err, &re):
		m.Code, m.Span = codeRange, &Span{Total: re.size}
	case errors.Is(err, fs.ErrNotExist):
		m.Code = codeNotFound
	case errors.Is(err, ErrExists):
		m.Code = codeExists
	}
	return m
}

// remoteError is the error an error message from the peer stands for.
func remoteError(m *message) *RemoteError {
	e := &RemoteError{Msg: m.Error, Code: m.Code}
	if m.Span != nil {
		e.Size = m.Span.Total
	}
	return e
}

// Is matches the error's code: fs.ErrNotExist, ErrExists, ErrRange.
func (e *RemoteError) Is(target error) bool {
	switch e.Code {
	case codeNotFound:
		return target == fs.ErrNotExist
	case codeExists:
		return target == ErrExists
	case codeRange:
		return target == ErrRange
	}
	return false
}
