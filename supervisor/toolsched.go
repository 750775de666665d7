package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// The agent tools that schedule and watch: reminders, metadata and
// subscriptions to other agents' state changes.

func (t *turnTools) remindMe(ctx context.Context, call provider.ToolCall, a remindMeArgs) (string, error) {
	after, err := parseDelay(json.RawMessage(a.Timeout))
	if err != nil || after <= 0 {
		return "", fmt.Errorf("timeout: %v", orText(err, "must be positive"))
	}
	every, err := parseDelay(json.RawMessage(a.Every))
	if err != nil || (len(a.Every) > 0 && string(a.Every) != "null" && every < time.Second) {
		return "", fmt.Errorf("every: %v", orText(err, "must be at least 1s"))
	}
	r := fsstore.Reminder{ID: t.newID(ctx), Reason: a.Reason, Due: t.c.clock.Now().UTC().Add(after),
		EverySeconds: int64(every / time.Second)}
	t.c.mu.Lock()
	set := slices.ContainsFunc(t.n.s().Reminders, func(o fsstore.Reminder) bool { return o.ID == r.ID })
	t.c.mu.Unlock()
	if !set {
		if err := t.c.commit(t.n, r); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("reminder %s set for %s", r.ID, r.Due.Format(time.RFC3339)), nil
}

func orText(err error, text string) string {
	if err != nil {
		return err.Error()
	}
	return text
}

func (t *turnTools) cancelReminder(ctx context.Context, call provider.ToolCall, a cancelReminderArgs) (string, error) {
	t.c.mu.Lock()
	found := slices.ContainsFunc(t.n.s().Reminders, func(r fsstore.Reminder) bool { return r.ID == a.ID })
	t.c.mu.Unlock()
	if !found {
		return "", fmt.Errorf("no reminder %q", a.ID)
	}
	if err := t.c.commit(t.n, fsstore.ReminderDone{ID: a.ID, Reason: "cancelled"}); err != nil {
		return "", err
	}
	return "reminder " + a.ID + " cancelled", nil
}

func (t *turnTools) setMetadata(ctx context.Context, call provider.ToolCall, a setMetadataArgs) (string, error) {
	if a.Key == "" {
		return "", fmt.Errorf("key is empty")
	}
	to, err := t.neighbour(a.AgentName)
	if err != nil {
		return "", err
	}
	if err := t.c.commit(to, fsstore.MetadataChange{Key: a.Key, Value: a.Value}); err != nil {
		return "", err
	}
	if a.Value == nil {
		return fmt.Sprintf("removed %s from %s's metadata", a.Key, to.s().Name), nil
	}
	return fmt.Sprintf("set %s=%q on %s", a.Key, *a.Value, to.s().Name), nil
}

var agentStates = []string{"*", "IDLE", "BUSY", "WAITING", "TERMINATED"}

func (t *turnTools) subscribe(ctx context.Context, call provider.ToolCall, a subscribeArgs) (string, error) {
	from, to, ok := strings.Cut(strings.ReplaceAll(a.Transition, " ", ""), "->")
	from, to = strings.ToUpper(from), strings.ToUpper(to)
	if !ok || !slices.Contains(agentStates, from) || !slices.Contains(agentStates, to) {
		return "", fmt.Errorf("transition %q must look like \"IDLE->BUSY\" (states: IDLE, BUSY, WAITING, TERMINATED, or *)", a.Transition)
	}
	target, err := t.neighbour(a.AgentName)
	if err != nil {
		return "", err
	}
	if target == t.n {
		return "", fmt.Errorf("you cannot subscribe to yourself")
	}
	s := fsstore.Subscription{ID: t.c.store.NewID(), Target: target.id(), From: from, To: to, Once: a.Once}
	if err := t.c.commit(t.n, s); err != nil {
		return "", err
	}
	return fmt.Sprintf("subscription %s: you will be told when %s goes %s -> %s", s.ID, target.s().Name, from, to), nil
}

func (t *turnTools) unsubscribe(ctx context.Context, call provider.ToolCall, a unsubscribeArgs) (string, error) {
	t.c.mu.Lock()
	found := slices.ContainsFunc(t.n.s().Subscriptions, func(s fsstore.Subscription) bool { return s.ID == a.ID })
	t.c.mu.Unlock()
	if !found {
		return "", fmt.Errorf("no subscription %q", a.ID)
	}
	if err := t.c.commit(t.n, fsstore.Unsubscribed{ID: a.ID}); err != nil {
		return "", err
	}
	return "subscription " + a.ID + " ended", nil
}
