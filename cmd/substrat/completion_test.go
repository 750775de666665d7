package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// BenchmarkCompleteAgents measures the names a completion of an agent
// ref offers, with 1,000 agents: from the files (daemon stopped) and from
// the daemon. Each op is one completion; the bound users feel is 100 ms.
func BenchmarkCompleteAgents(b *testing.B) {
	home := shortHome(b)
	st, err := fsstore.Open(home, fsstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		a, err := st.CreateAgent(&fsstore.Session{Name: fmt.Sprintf("agent%04d", i), Provider: "script"})
		if err != nil {
			b.Fatal(err)
		}
		a.Close()
	}
	b.Run("files", func(b *testing.B) {
		for b.Loop() {
			if n := len(storedAgents(home)); n != 1000 {
				b.Fatalf("%d names", n)
			}
		}
	})
	d := &e2eDaemon{t: b, home: home, env: append(os.Environ(), "SUBSTRAT_HOME=")}
	d.start()
	defer d.kill()
	var st2 api.StatusResult
	mustCall(d, api.DaemonStatus, struct{}{}, &st2)
	b.Run("daemon", func(b *testing.B) {
		for b.Loop() {
			if n := len(daemonAgents(home)); n != 1000 {
				b.Fatalf("%d names", n)
			}
		}
	})
}
