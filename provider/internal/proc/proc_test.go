package proc

import (
	"fmt"
	"testing"
)

func TestTailBuffer(t *testing.T) {
	b := &TailBuffer{Max: 10}
	if got := b.Tail(5); got != "" {
		t.Errorf("empty tail = %q", got)
	}
	fmt.Fprint(b, "  hello\n")
	if got := b.Tail(100); got != `"hello"` {
		t.Errorf("tail = %s", got)
	}
	for i := range 10 {
		fmt.Fprintf(b, "line %d\n", i)
	}
	if len(b.buf) > 20 {
		t.Errorf("buffer grew to %d bytes", len(b.buf))
	}
	if got := b.Tail(7); got != `..."line 9"` {
		t.Errorf("tail(7) = %s", got)
	}
}
