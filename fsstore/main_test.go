package fsstore

import (
	"os"
	"testing"
)

// TestMain runs the kill -9 helper when the test binary is re-executed as
// one (see kill_test.go), and removes the benchmark fixture at the end.
func TestMain(m *testing.M) {
	if os.Getenv(killHelperEnv) != "" {
		os.Exit(killHelper())
	}
	code := m.Run()
	removeScanFixture()
	os.Exit(code)
}
