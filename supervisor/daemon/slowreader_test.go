package daemon

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// A client that reads late still gets its reply: the stream says how many
// frames it dropped, and the final result holds the whole text and the
// count. It used to wait forever for events the full buffer had dropped,
// or end a 3,000-line turn after a few hundred lines with success.
func TestSlowReaderGetsItsReply(t *testing.T) {
	_, sock := startDaemon(t)
	rc := dialRaw(t, sock)
	fmt.Fprintf(rc.c, `{"id":1,"method":"agent.create","params":{"name":"talker"}}`+"\n")
	if line, err := rc.br.ReadString('\n'); err != nil || strings.Contains(line, "error") {
		t.Fatalf("create: %s %v", line, err)
	}
	var lines []string
	for i := range 3000 {
		lines = append(lines, fmt.Sprintf("line %d %s", i, strings.Repeat("x", 60)))
	}
	req, _ := json.Marshal(map[string]any{"id": 2, "method": "agent.send",
		"params": map[string]any{"ref": "talker", "text": strings.Join(lines, "\n"), "wait": true}})
	rc.c.Write(append(req, '\n'))
	time.Sleep(3 * time.Second) // read nothing while the turn streams
	var (
		frames, dropped int
		res             api.SendResult
	)
	rc.c.SetReadDeadline(time.Now().Add(60 * time.Second))
	var parts strings.Builder // a result longer than a line comes in parts (package rpc)
	for {
		line, err := rc.br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %d frames: %v", frames, err)
		}
		var r struct {
			Frame  json.RawMessage `json:"frame"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
			Part   string          `json:"part"`
			Parts  int             `json:"parts"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		if r.Error != nil {
			t.Fatalf("error: %s", r.Error)
		}
		if r.Part != "" {
			parts.WriteString(r.Part)
			continue
		}
		if r.Parts > 0 {
			r.Result = json.RawMessage(parts.String())
		}
		if r.Result != nil {
			if err := json.Unmarshal(r.Result, &res); err != nil {
				t.Fatal(err)
			}
			break
		}
		frames++
		var f struct {
			Type  string `json:"type"`
			Count int    `json:"count"`
		}
		json.Unmarshal(r.Frame, &f)
		if f.Type == "dropped" {
			dropped += f.Count
		}
	}
	t.Logf("%d frames read, %d dropped and said so; result dropped %d", frames, dropped, res.Dropped)
	if res.Failed != "" || !strings.Contains(res.Text, "line 2999") {
		t.Fatalf("result: failed %q, text ends %q", res.Failed, res.Text[max(0, len(res.Text)-40):])
	}
	if dropped == 0 || res.Dropped != dropped {
		t.Fatalf("dropped frames: %d said in the stream, %d in the result; want the same, and some", dropped, res.Dropped)
	}
}
