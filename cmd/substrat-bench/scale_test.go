package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchScale runs the scale phase on a real daemon at a tiny size
// (SUBSTRAT_SCALE=1000,10000 for the real figures, printed with -v) and
// checks every figure was taken. It asserts nothing about speed: the
// machine is shared.
func TestBenchScale(t *testing.T) {
	sizes := []int{60}
	if env := os.Getenv("SUBSTRAT_SCALE"); env != "" {
		sizes = nil
		for _, s := range strings.Split(env, ",") {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	exe := filepath.Join(t.TempDir(), "substrat")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/substrat/substrat/cmd/substrat").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := benchConfig{Duration: 300 * time.Millisecond, Rounds: 3, Exe: exe, Scale: sizes}
	var progress bytes.Buffer
	b := &benchRun{ctx: context.Background(), cfg: cfg, dir: t.TempDir(), log: &progress, res: &benchResult{}}
	if err := b.scale(); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	writeScaleReport(&out, b.res)
	t.Logf("\n%s", out.String())
	if len(b.res.Scale) != len(sizes) {
		t.Fatalf("%d rows for %d sizes", len(b.res.Scale), len(sizes))
	}
	for _, s := range b.res.Scale {
		if s.StartMS <= 0 || s.ListMS <= 0 || s.ListCLIMS <= 0 || s.PageMS <= 0 || s.TopReadMS <= 0 || s.TopRefreshMS <= 0 ||
			s.TopRefreshBytes <= 0 || s.Creates < 10 || s.CreatePerSec <= 0 || s.RSSMB <= 0 || s.PeakMB < s.RSSMB {
			t.Errorf("a figure is missing: %+v", s)
		}
		if s.ListBytes <= s.TopRefreshBytes && s.Agents > 100 {
			t.Errorf("top's refresh read %d bytes, the whole list %d", s.TopRefreshBytes, s.ListBytes)
		}
	}
	if !strings.Contains(out.String(), "SCALE (a real daemon") {
		t.Errorf("no scale table in the report:\n%s", out.String())
	}
}
