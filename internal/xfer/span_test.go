package xfer

import (
	"errors"
	"io/fs"
	"testing"
)

func TestSpanResolve(t *testing.T) {
	for _, c := range []struct {
		ask  Span
		size int64
		want Span
		err  error
	}{
		{Span{}, 100, Span{Count: 100, Total: 100}, nil},
		{Span{From: 10, Count: 5}, 100, Span{From: 10, Count: 5, Total: 100}, nil},
		{Span{From: 90, Count: 50}, 100, Span{From: 90, Count: 10, Total: 100}, nil},
		{Span{From: 99}, 100, Span{From: 99, Count: 1, Total: 100}, nil},
		{Span{From: -10}, 100, Span{From: 90, Count: 10, Total: 100}, nil},
		{Span{From: -500}, 100, Span{Count: 100, Total: 100}, nil},
		{Span{From: -5}, 0, Span{}, nil},
		{Span{From: 100}, 100, Span{}, ErrRange},
		{Span{}, 0, Span{}, ErrRange},
		{Span{From: 1, Count: -1}, 100, Span{}, errors.New("any")},
	} {
		got, err := c.ask.resolve(c.size)
		if (err != nil) != (c.err != nil) || c.err == ErrRange && !errors.Is(err, ErrRange) || err == nil && got != c.want {
			t.Errorf("%+v.resolve(%d) = %+v, %v; want %+v, %v", c.ask, c.size, got, err, c.want, c.err)
		}
	}
}

// TestErrorCodes: the server's refusals reach the client with their kind.
func TestErrorCodes(t *testing.T) {
	_, rerr := Span{From: 7}.resolve(3)
	for _, c := range []struct {
		err    error
		target error
		size   int64
	}{
		{noFile("x"), fs.ErrNotExist, 0},
		{rerr, ErrRange, 3},
		{ErrExists, ErrExists, 0},
	} {
		m := errorMessage(c.err)
		got := remoteError(m)
		if !errors.Is(got, c.target) || got.Size != c.size || got.Msg != c.err.Error() {
			t.Errorf("%v: remote %+v (Is %v: %v)", c.err, got, c.target, errors.Is(got, c.target))
		}
	}
	if got := remoteError(errorMessage(errors.New("disk on fire"))); got.Code != "" || errors.Is(got, fs.ErrNotExist) {
		t.Errorf("an unclassified refusal got code %q", got.Code)
	}
}
