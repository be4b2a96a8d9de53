package pipe_test

import (
	"fmt"

	"github.com/xdproce/xdproce/link/pipe"
)

func Example() {
	// A pipe that loses every frame a sends, deterministically.
	a, b, err := pipe.New(pipe.Config{Seed: 1, AtoB: pipe.Faults{Loss: 1}})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	defer b.Close()

	bufs := make([][]byte, 2)
	a.Alloc(bufs[:1])
	b.Alloc(bufs[1:])
	f := copy(bufs[0], "an Ethernet frame of a kind")
	a.Send([][]byte{bufs[0][:f]}) // lost
	g := copy(bufs[1], "a reply that makes it through")
	b.Send([][]byte{bufs[1][:g]})

	frames := make([][]byte, 8)
	n, _ := a.Receive(frames)
	fmt.Printf("a received %d: %q\n", n, frames[0])
	n, _ = b.Receive(frames)
	fmt.Printf("b received %d\n", n)
	fmt.Printf("a→b: %+v\n", a.Stats())
	// Output:
	// a received 1: "a reply that makes it through"
	// b received 0
	// a→b: {Frames:1 Delivered:0 Received:0 Lost:1 Reordered:0 Duplicated:0 Corrupted:0 Marked:0 Delayed:0 Overflow:0 PeerClosed:0}
}
