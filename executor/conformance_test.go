package executor_test

import (
	"context"
	"testing"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/executortest"
)

// TestLocalConformance: Local passes the suite, with the daemon's bwrap
// command (bind descriptors and all).
func TestLocalConformance(t *testing.T) {
	if _, err := launch.LookPath(); err != nil {
		t.Skip(err)
	}
	executortest.Run(t, executor.Local{}, func(t *testing.T, cmd ...string) *executor.Cmd {
		sb, err := launch.Command(context.Background(), bwrap.Spec{Root: bwrap.Source{Host: t.TempDir()}}, cmd)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { launch.CloseFiles(sb) })
		return &executor.Cmd{Argv: sb.Args, ExtraFiles: sb.ExtraFiles}
	})
}
