package daemon

import (
	"context"
	"errors"
	"testing"

	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// TestEveryMethodServed: each method name of the wire contract is served
// on daemon.sock: none is refused with unknown_method (each gets bad
// params here, and answers with its own error, or ignores them).
func TestEveryMethodServed(t *testing.T) {
	_, sock := startDaemon(t)
	ctx := context.Background()
	for _, m := range api.Methods {
		c, err := rpc.Dial(ctx, sock)
		if err != nil {
			t.Fatal(err)
		}
		err = callRaw(ctx, c, m, map[string]any{"no_such_param": 1})
		c.Close()
		var re *api.Error
		if err != nil && (!errors.As(err, &re) || re.Code == api.CodeUnknownMethod) {
			t.Errorf("%s: %v: not served", m, err)
		}
	}
}
