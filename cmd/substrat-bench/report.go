package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func machineInfo(dir string) benchMachine {
	m := benchMachine{CPUs: runtime.NumCPU(), Procs: runtime.GOMAXPROCS(0), Go: runtime.Version(), Dir: dir}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				m.MemGiB = math.Round(kb/(1<<20)*10) / 10
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = "Linux " + unix.ByteSliceToString(u.Release[:])
	}
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil {
		m.Size = humanBytes(float64(st.Blocks) * float64(st.Bsize))
		m.Avail = humanBytes(float64(st.Bavail) * float64(st.Bsize))
	}
	// The mount that holds dir: the longest mount point that prefixes it.
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		best := -1
		for _, l := range strings.Split(string(data), "\n") {
			pre, post, ok := strings.Cut(l, " - ")
			if !ok {
				continue
			}
			f, g := strings.Fields(pre), strings.Fields(post)
			if len(f) < 6 || len(g) < 2 {
				continue
			}
			mp := f[4]
			if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
				best = len(mp)
				m.Mount, m.MountOps, m.FSType, m.Device = mp, f[5], g[0], g[1]
			}
		}
	}
	return m
}

func humanBytes(n float64) string {
	for _, u := range []string{"B", "K", "M", "G", "T"} {
		if n < 1024 || u == "T" {
			if n < 10 && u != "B" {
				return fmt.Sprintf("%.1f%s", n, u)
			}
			return fmt.Sprintf("%.0f%s", n, u)
		}
		n /= 1024
	}
	return ""
}

// The targets.

func benchTargets(r *benchResult) []benchTarget {
	var ts []benchTarget
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	for _, op := range r.Ops {
		if !op.Target {
			continue
		}
		ts = append(ts, benchTarget{Name: fmt.Sprintf("%s, %d agents: fsyncs/s over the %d-writer limit", op.Label, r.Workers, r.Workers),
			Value: op.LimitRatioN, Want: ">= 0.8", Verdict: verdict(op.LimitRatioN >= 0.8)})
		t := benchTarget{Name: fmt.Sprintf("%s, %d agents: times faster than SQLite", op.Label, r.Workers), Want: ">= 3"}
		if op.SQLiteN == nil {
			t.Verdict, t.Note = "n/a", "SQLite "+sqliteMissing
		} else {
			t.Value, t.Verdict = op.SQLiteRatioN, verdict(op.SQLiteRatioN >= 3)
		}
		ts = append(ts, t)
	}
	for _, rc := range r.Recovery {
		ts = append(ts, benchTarget{Name: fmt.Sprintf("start-up recovery, %d agents: times the bare read", rc.Agents),
			Value: rc.Ratio, Want: "<= 2", Verdict: verdict(rc.Ratio <= 2)})
	}
	t := benchTarget{Name: "hand edit visible in agent inspect: p99 ms", Want: "<= 100"}
	if r.HandEdit.NA != "" {
		t.Verdict, t.Note = "n/a", r.HandEdit.NA
	} else {
		t.Value, t.Verdict = r.HandEdit.P99MS, verdict(r.HandEdit.P99MS <= 100)
	}
	ts = append(ts, t)
	for _, c := range r.CLIs {
		if c.Skipped != "" {
			continue
		}
		ts = append(ts, benchTarget{Name: fmt.Sprintf("%s turn through Substrat: times the bare CLI's (p50)", c.Name),
			Value: c.Ratio, Want: "<= 1.1", Verdict: verdict(c.Ratio <= 1.1)})
	}
	t = benchTarget{Name: fmt.Sprintf("daemon RSS with %d idle agents: MB", r.RSS.Agents), Value: r.RSS.RSSMB, Want: "<= 150",
		Verdict: verdict(r.RSS.RSSMB <= 150)}
	if r.RSS.Agents < 10000 {
		t.Note = "the target is for 10,000 agents"
	}
	ts = append(ts, t)
	return ts
}

// The report.

// benchTable lays out rows: the first column left-aligned, the others
// right-aligned, two spaces apart.
type benchTable [][]string

func (t *benchTable) add(cells ...string) { *t = append(*t, cells) }

func (t benchTable) write(w io.Writer) {
	var width []int
	for _, row := range t {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, row := range t {
		var b strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func writeBenchReport(w io.Writer, r *benchResult) {
	writeBenchHeader(w, r)
	writeOpsReport(w, r)
	writeRecoveryReport(w, r)
	writeDaemonReport(w, r)
	writeCLIReport(w, r)
	writeParking(w, r.Parking) // park.go
	writeScaleReport(w, r)     // scale.go
	writeTargets(w, r)
}

// num is a figure with thousands separated; x a ratio ("-" for none);
// opt a rate's ops/s ("-" for none).
func num(v float64) string { return thousands(v) }

func x(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func opt(rt *benchRate) string {
	if rt == nil {
		return "-"
	}
	return num(rt.OpsPerSec)
}

// writeBenchHeader writes what ran, and on what machine and disk.
func writeBenchHeader(w io.Writer, r *benchResult) {
	m := r.Machine
	mode := "full run"
	if r.Quick {
		mode = "quick run"
	}
	fmt.Fprintf(w, "Substrat bench (%s, %.0f s, %s per throughput figure), %s\n", mode, r.Seconds,
		time.Duration(r.DurationMS)*time.Millisecond, r.StartedAt.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "machine: %d cores", m.CPUs)
	if m.CPUModel != "" {
		fmt.Fprintf(w, " (%s)", m.CPUModel)
	}
	fmt.Fprintf(w, ", %.0f GiB RAM, %s, %s, GOMAXPROCS %d\n", m.MemGiB, m.Kernel, m.Go, m.Procs)
	fmt.Fprintf(w, "disk:    %s, %s on %s (%s), %s, %s free; bench dir %s\n", m.Device, m.FSType, m.Mount, m.MountOps, m.Size, m.Avail, m.Dir)
	fmt.Fprintf(w, "SQLite:  %s\n", r.SQLite)
	fmt.Fprintln(w, "The page cache is warm throughout; every fsync reaches the device.")
}

// writeOpsReport writes the disk's limits and the operations' figures.
func writeOpsReport(w io.Writer, r *benchResult) {
	n := r.Workers
	fmt.Fprintln(w)
	d := r.Disk
	var t benchTable
	t.add("DISK LIMITS", "ops/s", "fsyncs/op", "fsyncs/s")
	t.add(fmt.Sprintf("write+fsync (%d-byte line), 1 writer", d.LineBytes), num(d.Fsync1.OpsPerSec), "1", num(d.Fsync1.FsyncsPerSec))
	t.add(fmt.Sprintf("write+fsync, %d writers on separate files: the limit", n), num(d.FsyncN.OpsPerSec), "1", num(d.FsyncN.FsyncsPerSec))
	t.add("atomic replace (write, fsync, rename, dir fsync), 1 writer", num(d.Replace1.OpsPerSec), "2", num(d.Replace1.FsyncsPerSec))
	t.add(fmt.Sprintf("atomic replace, %d writers in separate dirs", n), num(d.ReplaceN.OpsPerSec), "2", num(d.ReplaceN.FsyncsPerSec))
	t.add("new file (create, write, fsync), 1 writer", num(d.NewFile1.OpsPerSec), "1", num(d.NewFile1.FsyncsPerSec))
	t.add(fmt.Sprintf("new file, %d writers in separate dirs", n), num(d.NewFileN.OpsPerSec), "1", num(d.NewFileN.FsyncsPerSec))
	t.add("create an empty file, no fsync (a namespace operation), 1 writer", num(d.Create1.OpsPerSec), "0", "-")
	t.write(w)

	fmt.Fprintln(w)
	t = nil
	t.add("OPERATIONS, 1 AGENT", "code path", "fsyncs/op", "ops/s", "fsyncs/s", "x limit(1)", "bare ops/s", "x bare", "SQLite ops/s", "x SQLite")
	for _, op := range r.Ops {
		t.add(op.Label, op.CodePath, fmt.Sprintf("%g", op.FsyncsPerOp), num(op.Substrat1.OpsPerSec), num(op.Substrat1.FsyncsPerSec),
			x(op.LimitRatio1), opt(op.Bare1), x(op.BareRatio1), opt(op.SQLite1), x(op.SQLiteRatio1))
	}
	t.write(w)
	fmt.Fprintln(w)
	t = nil
	t.add(fmt.Sprintf("OPERATIONS, %d AGENTS AT ONCE", n), "ops/s", "fsyncs/s", "x limit", ">=0.8", "bare ops/s", "x bare", "SQLite ops/s", "x SQLite", ">=3x")
	for _, op := range r.Ops {
		v1, v2 := "info", "info"
		if op.Target {
			v1 = pass(op.LimitRatioN >= 0.8)
			v2 = "n/a"
			if op.SQLiteN != nil {
				v2 = pass(op.SQLiteRatioN >= 3)
			}
		}
		t.add(op.Label, num(op.SubstratN.OpsPerSec), num(op.SubstratN.FsyncsPerSec), x(op.LimitRatioN), v1,
			opt(op.BareN), x(op.BareRatioN), opt(op.SQLiteN), x(op.SQLiteRatioN), v2)
		if op.CeilingN != nil {
			t.add("  the same, every fsync a no-op: the ceiling", num(op.CeilingN.OpsPerSec), "0", "-", "", "", "", "", x(op.CeilingSQLiteRatioN), "")
		}
	}
	t.write(w)
	fmt.Fprintln(w, "  ceiling: what no batching of fsyncs can pass with this on-disk format here (the names made, the writes, the CPU).")
	fmt.Fprintf(w, "  limit: write+fsync with %d writers, in fsyncs/s (limit(1): with 1 writer). bare: the operation's own system calls\n", n)
	fmt.Fprintf(w, "  made directly, without Substrat. SQLite with %d writers: the better of %d connections and one shared connection.\n", n, n)
	if !r.HasSQLite {
		fmt.Fprintf(w, "  SQLite %s.\n", sqliteMissing)
	}

}

// writeRecoveryReport writes the start-up recovery figures.
func writeRecoveryReport(w io.Writer, r *benchResult) {
	fmt.Fprintln(w)
	var t benchTable
	t.add("START-UP RECOVERY (warm cache, best of rounds)", "read every file", "Core.Recover", "x read", "<=2x", "read+list dirs", "x read+list")
	for _, rc := range r.Recovery {
		t.add(fmt.Sprintf("%s agents x %d events (%.0f MB)", thousands(float64(rc.Agents)), rc.Events, float64(rc.Bytes)/1e6),
			fmt.Sprintf("%.0f ms", rc.ReadMS), fmt.Sprintf("%.0f ms", rc.RecoverMS), fmt.Sprintf("%.2f", rc.Ratio), pass(rc.Ratio <= 2),
			fmt.Sprintf("%.0f ms", rc.ListMS), x(ratio(rc.RecoverMS, rc.ListMS)))
	}
	t.write(w)
	fmt.Fprintln(w, "  read: session.json and events.jsonl of every agent; read+list also lists the directories a scan must list")
	fmt.Fprintln(w, "  (the agent dir, inbox/tmp, inbox/new) and stats inbox/cur. Both with as many workers as the scan.")

}

// writeDaemonReport writes the real daemon's latencies, RSS and start.
func writeDaemonReport(w io.Writer, r *benchResult) {
	fmt.Fprintln(w)
	var t benchTable
	t.add("DAEMON (the real binary, script provider)", "p50", "p99", "n", "target")
	t.add("agent send, waiting for the turn (RPC round trip)", fmt.Sprintf("%.1f ms", r.RPC.P50MS), fmt.Sprintf("%.1f ms", r.RPC.P99MS),
		strconv.Itoa(r.RPC.N), "-")
	if r.HandEdit.NA != "" {
		t.add("hand edit of session.json -> visible in agent inspect", r.HandEdit.NA, "", "", "p99 <= 100 ms: n/a")
	} else {
		t.add("hand edit of session.json -> visible in agent inspect", fmt.Sprintf("%.1f ms", r.HandEdit.P50MS),
			fmt.Sprintf("%.1f ms", r.HandEdit.P99MS), strconv.Itoa(r.HandEdit.N), "p99 <= 100 ms: "+pass(r.HandEdit.P99MS <= 100))
	}
	t.write(w)
	fmt.Fprintf(w, "RSS with %s idle agents, after recovery: %.0f MB (peak %.0f MB); target <= 150 MB: %s\n",
		thousands(float64(r.RSS.Agents)), r.RSS.RSSMB, r.RSS.PeakMB, pass(r.RSS.RSSMB <= 150))
	fmt.Fprintf(w, "daemon start with %s agents, until it answers: %.0f ms\n", thousands(float64(r.RSS.Agents)), r.RSS.StartMS)

}

// writeCLIReport writes the agent CLIs' turns, if any ran.
func writeCLIReport(w io.Writer, r *benchResult) {
	if len(r.CLIs) > 0 {
		fmt.Fprintln(w)
		var t benchTable
		t.add("CLI TURNS (the real CLI, a loopback fake API)", "n", "bare p50", "its result at", "bare+MCP p50", "Substrat p50", "x bare", "<=1.1x",
			"x bare+MCP", "RSS bare", "RSS Substrat")
		var skipped []string
		for _, c := range r.CLIs {
			if c.Skipped != "" {
				skipped = append(skipped, fmt.Sprintf("  %s: %s; skipped.", c.Name, c.Skipped))
				continue
			}
			t.add(c.Name, strconv.Itoa(c.Turns), fmt.Sprintf("%.0f ms", c.BareP50MS), fmt.Sprintf("%.0f ms", c.BareResultP50MS), fmt.Sprintf("%.0f ms", c.MCPP50MS), fmt.Sprintf("%.0f ms", c.SubstratP50MS),
				fmt.Sprintf("%.2f", c.Ratio), pass(c.Ratio <= 1.1), fmt.Sprintf("%.2f", c.MCPRatio),
				fmt.Sprintf("%.0f MB", c.BareRSSMB), fmt.Sprintf("%.0f MB", c.RSSMB))
		}
		if len(t) > 1 {
			t.write(w)
		}
		for _, s := range skipped {
			fmt.Fprintln(w, s)
		}
		fmt.Fprintln(w, "  bare: the command, environment, directory and prompt the adapter gave the CLI, run directly, without Substrat's")
		fmt.Fprintln(w, "  MCP server, until it exits (its result line comes earlier); bare+MCP: the same with it; Substrat: agent send --wait")
		fmt.Fprintln(w, "  to a real daemon, which ends the turn at the result line and lets the CLI exit in the background. The three alternate.")
		fmt.Fprintln(w, "  RSS: the sum of the peaks of the CLI's processes in one turn (through Substrat, its MCP server and containment included).")
	}
}

// writeTargets writes each target's verdict.
func writeTargets(w io.Writer, r *benchResult) {
	counts := map[string]int{}
	for _, t := range r.Targets {
		counts[t.Verdict]++
	}
	fmt.Fprintf(w, "\nTARGETS: %d PASS, %d MISS, %d n/a\n", counts["PASS"], counts["MISS"], counts["n/a"])
	for _, t := range r.Targets {
		line := fmt.Sprintf("  %-4s %s", t.Verdict, t.Name)
		if t.Verdict != "n/a" {
			line += fmt.Sprintf(" = %.2f (want %s)", t.Value, t.Want)
		}
		if t.Note != "" {
			line += ": " + t.Note
		}
		fmt.Fprintln(w, line)
	}
}

func pass(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
