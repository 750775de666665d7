package sim

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if built { // only then: buildSubstrat builds on its first call
		if bin, err := buildSubstrat(); err == nil {
			os.RemoveAll(filepath.Dir(bin))
		}
	}
	os.Exit(code)
}
