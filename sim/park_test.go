package sim

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/api"
)

// parkMark in a turn's prompt makes parkProvider answer that its usage
// limit is reached until parkReset.
const parkMark = "PARK-ME"

var parkReset = Epoch.Add(time.Hour)

// parkProvider is a provider whose turns that carry parkMark hit a usage
// limit until parkReset, by the simulated clock.
type parkProvider struct {
	provider.Provider
	clock *Clock
}

func (p parkProvider) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	s, err := p.Provider.Create(ctx, cfg)
	return parkSession{s, p.clock}, err
}

func (p parkProvider) Restore(ctx context.Context, cfg provider.Config, state []byte) (provider.Session, error) {
	s, err := p.Provider.Restore(ctx, cfg, state)
	return parkSession{s, p.clock}, err
}

type parkSession struct {
	provider.Session
	clock *Clock
}

func (s parkSession) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	if strings.Contains(turn.Prompt, parkMark) && s.clock.Now().Before(parkReset) {
		return provider.TurnResult{}, &provider.RateLimited{Until: parkReset, Reason: "usage limit reached"}
	}
	return s.Session.Send(ctx, turn)
}

// TestParkSurvivesCrash: a root's turn hits its provider's usage limit
// and parks. The machine loses power before each persist point of that
// turn, and after it; each image is recovered by a new core (unclean):
// the message is never lost (it is in the root's inbox, waiting); an
// agent recovered parked is not runnable before the reset, and the image
// taken after the park is recovered parked; at the reset (a Tick) every
// image's root runs its turn by itself and answers, no longer parked.
func TestParkSurvivesCrash(t *testing.T) {
	wrapProvider = func(p provider.Provider, clock *Clock) provider.Provider { return parkProvider{p, clock} }
	t.Cleanup(func() { wrapProvider = nil })
	clock := NewClock(Epoch)
	fsys := NewFS(clock.Now)
	w, err := start(fsys, clock, NewIDs(clock.Now, 7, 0), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, a := range []Action{{Kind: CreateRoot, Name: "r"}, {Kind: UserSend, Name: "r", Text: parkMark + " then answer"}} {
		if err := w.do(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	var images []*FS
	fsys.SetHook(func(int64, string) { images = append(images, fsys.Clone()) })
	clock.Set(Epoch.Add(time.Minute))
	if err := w.do(ctx, Action{Kind: Turn, Name: "r"}); err != nil {
		t.Fatal(err)
	}
	fsys.SetHook(nil)
	images = append(images, fsys.Clone())
	if a := agentInfo(t, w, "r"); a.Parked == nil || !a.Parked.Until.Equal(parkReset) {
		t.Fatalf("the turn did not park r: %+v", a)
	}
	parkedAfter := 0
	for i, img := range images {
		img.Crash(rand.New(rand.NewPCG(7, uint64(i))))
		c2 := NewClock(Epoch.Add(2 * time.Minute))
		img.SetClock(c2.Now)
		w2, err := start(img, c2, NewIDs(c2.Now, 8, uint64(i+1)<<20), true, nil)
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
		a := agentInfo(t, w2, "r")
		id := a.ID
		if a.Parked != nil {
			parkedAfter++
			for _, r := range w2.core.Runnable() {
				if r == id {
					t.Fatalf("image %d: r is recovered parked until %s, yet runnable", i, a.Parked.Until)
				}
			}
		}
		if i == len(images)-1 && a.Parked == nil {
			t.Fatalf("the image taken after the park lost it: %+v", a)
		}
		if !waiting(t, w2, id) {
			t.Fatalf("image %d: the message that parked r is lost", i)
		}
		// Before the reset r may only park (again); at the reset it answers.
		if err := w2.do(ctx, Action{Kind: Drain}); err != nil {
			t.Fatalf("image %d: drain: %v", i, err)
		}
		c2.Set(parkReset)
		if err := w2.do(ctx, Action{Kind: Tick}); err != nil {
			t.Fatal(err)
		}
		if err := w2.do(ctx, Action{Kind: Drain}); err != nil {
			t.Fatalf("image %d: drain at the reset: %v", i, err)
		}
		if a := agentInfo(t, w2, "r"); a.Parked != nil || waiting(t, w2, id) || a.Counters.Turns == 0 {
			t.Fatalf("image %d: at the reset r did not answer: %+v", i, a)
		}
	}
	t.Logf("%d crash images of the parking turn; %d recovered parked", len(images), parkedAfter)
}

func agentInfo(t *testing.T, w *world, name string) api.AgentInfo {
	t.Helper()
	for _, a := range w.core.List() {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no agent %s", name)
	return api.AgentInfo{}
}

// waiting reports whether agent id has a message in inbox/new.
func waiting(t *testing.T, w *world, id string) bool {
	t.Helper()
	msgs, _, err := fsstore.ReadInbox(w.fs, w.store.Layout().Agent(id).Inbox(), fsstore.InboxNew)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if strings.Contains(m.Text, parkMark) {
			return true
		}
	}
	return false
}
