package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor"
)

// DemoCmd runs the main job end to end on the script provider.
type DemoCmd struct {
	Timeout time.Duration `help:"Give up after this long." default:"60s"`
	Keep    bool          `help:"Leave the daemon running at the end."`
}

var demoWorkers = []string{"alice", "bob", "carol"}

// demoScript is what the lead agent is told: spawn three workers. Each
// worker greets the next one with a message that, read by the script
// provider, makes the next one finish and report to the lead.
func demoScript() string {
	cmd := func(tool string, args any) string {
		b, _ := json.Marshal(args)
		return "!" + tool + " " + string(b)
	}
	var lines []string
	for i, w := range demoWorkers {
		next := demoWorkers[(i+1)%len(demoWorkers)]
		greeting := strings.Join([]string{
			fmt.Sprintf("hello %s, this is %s", next, w),
			"!sleep 500ms",
			cmd("complete", map[string]string{"result": fmt.Sprintf("%s was greeted by %s and is done", next, w)}),
		}, "\n")
		instructions := strings.Join([]string{
			fmt.Sprintf("I am %s, a worker of the demo team.", w),
			"!sleep 700ms",
			cmd("send_message", map[string]string{"recipient": next, "text": greeting}),
		}, "\n")
		lines = append(lines, cmd("spawn_agent", map[string]string{"name": w, "instructions": instructions}))
	}
	lines = append(lines, cmd("list_children", map[string]string{}))
	return strings.Join(lines, "\n")
}

// Run runs the demo.
func (c *DemoCmd) Run(g *Globals) error {
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Printf("[%5.1fs] ", time.Since(start).Seconds())
		fmt.Printf(format+"\n", args...)
	}
	home := g.Home
	if def, _ := os.UserHomeDir(); home == def+"/.substrat" || home == "" {
		dir, err := os.MkdirTemp("", "substrat-demo-")
		if err != nil {
			return err
		}
		home = dir
	}
	dg := &Globals{Home: home}
	layout := fsstore.Layout{Home: home}
	deadline := time.Now().Add(c.Timeout)

	step("home: %s", home)
	pid, err := startDaemon(dg, 4, 30*time.Second)
	if err != nil {
		return err
	}
	step("daemon started (pid %d)", pid)

	var lead supervisor.AgentInfo
	if err := dg.call("agent.create", supervisor.CreateParams{Name: "lead", Provider: "script",
		Instructions: "Lead the demo team."}, &lead); err != nil {
		return err
	}
	step("created root agent %s (%s)", lead.Name, lead.ID)
	var sent supervisor.SendResult
	if err := dg.call("agent.send", map[string]any{"ref": "lead", "text": demoScript()}, &sent); err != nil {
		return err
	}
	step("asked lead to spawn %s; message %s is durable", strings.Join(demoWorkers, ", "), sent.MessageID)

	// Wait until the team is mid-work: every worker exists and one is busy.
	for {
		if time.Now().After(deadline) {
			return fail("the demo timed out before the team started", "see "+layout.Log())
		}
		list, err := demoList(dg)
		if err != nil {
			return err
		}
		workers, busy := 0, 0
		for _, a := range list {
			if a.ParentID == lead.ID {
				workers++
				if a.AgentState == "BUSY" {
					busy++
				}
			}
		}
		if workers == len(demoWorkers) && busy > 0 {
			step("team at work: %d workers, %d busy", workers, busy)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	step("kill -9 the daemon (pid %d) mid-work", pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	for held, _ := supervisor.Held(layout.Lock()); held; held, _ = supervisor.Held(layout.Lock()) {
		time.Sleep(10 * time.Millisecond)
	}
	pid, err = startDaemon(dg, 4, 30*time.Second)
	if err != nil {
		return err
	}
	step("daemon restarted (pid %d); recovery report:", pid)
	var rep supervisor.Report
	if err := dg.call("daemon.recovery", nil, &rep); err != nil {
		return err
	}
	printReport(&rep)

	step("waiting for the team to finish")
	for {
		if time.Now().After(deadline) {
			return fail("the demo timed out waiting for the team", "see "+layout.Log()+" and 'substrat --home "+home+" agent list'")
		}
		list, err := demoList(dg)
		if err != nil {
			return err
		}
		done, idle := 0, false
		for _, a := range list {
			if a.ParentID == lead.ID && a.AgentState == "TERMINATED" {
				done++
			}
			if a.ID == lead.ID {
				idle = a.AgentState == "IDLE"
			}
		}
		var insp supervisor.InspectResult
		if err := dg.call("agent.inspect", map[string]string{"ref": lead.ID}, &insp); err != nil {
			return err
		}
		if done == len(demoWorkers) && idle && insp.Pending == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	step("all %d workers completed; final tree:", len(demoWorkers))
	list, err := demoList(dg)
	if err != nil {
		return err
	}
	fmt.Print(drawTree(list))
	step("what lead was told, read straight from its inbox/cur/ files:")
	msgs, _, err := fsstore.ReadInbox(fsstore.OS{}, layout.Agent(lead.ID).Inbox(), fsstore.InboxCur)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		fmt.Printf("  from %-7s %s\n", m.FromName+":", oneLine(m.Text, 90))
	}

	if c.Keep {
		step("the daemon keeps running: substrat --home %s daemon stop", home)
	} else {
		if err := (&DaemonStopCmd{Timeout: 30 * time.Second}).Run(dg); err != nil {
			return err
		}
	}
	step("done. Everything is plain files; look for yourself:")
	fmt.Printf(`
  export SUBSTRAT_HOME=%[1]s
  jq . $SUBSTRAT_HOME/recovery.json                        # what the restart found and did
  for d in $SUBSTRAT_HOME/agents/*/; do jq -r '"\(.name)\t\(.agent_state)\t\(.counters.turns) turns"' $d/session.json; done
  jq -c '{seq, type, data}' $SUBSTRAT_HOME/agents/%[2]s/events.jsonl   # lead's history
  jq -r .text $SUBSTRAT_HOME/agents/%[2]s/inbox/cur/*.json            # what lead was told
  substrat agent list                                      # (after: substrat daemon start)
`, home, lead.ID)
	return nil
}

func demoList(g *Globals) ([]supervisor.AgentInfo, error) {
	var list []supervisor.AgentInfo
	err := g.call("agent.list", nil, &list)
	return list, err
}
