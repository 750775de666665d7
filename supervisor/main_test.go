package supervisor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/supervisor/rpc"
)

// dialEnv, when set, makes the test binary a client of the socket it
// names (see TestSandboxCannotDriveDaemon): it asks for daemon.status and
// prints the answer or the error.
const dialEnv = "SUBSTRAT_TEST_DIAL"

func TestMain(m *testing.M) {
	if sock := os.Getenv(dialEnv); sock != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := rpc.Dial(ctx, sock)
		if err == nil {
			var st api.StatusResult
			if err = c.Call(ctx, "daemon.status", nil, &st); err == nil {
				fmt.Printf("status: pid %d\n", st.Pid)
			}
		}
		if err != nil {
			fmt.Printf("error: %v\n", err)
		}
		os.Exit(0)
	}
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}
