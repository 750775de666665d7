package provider_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/substrat/substrat/provider"
)

type namedProvider struct{ name string }

func (p namedProvider) Name() string { return p.name }
func (p namedProvider) Create(context.Context, provider.Config) (provider.Session, error) {
	return nil, errors.New("not implemented")
}
func (p namedProvider) Restore(context.Context, provider.Config, []byte) (provider.Session, error) {
	return nil, errors.New("not implemented")
}

func TestRegistryGet(t *testing.T) {
	r := provider.NewRegistry(namedProvider{"script"}, namedProvider{"claude"})
	p, err := r.Get("script")
	if err != nil || p.Name() != "script" {
		t.Fatalf("Get(script) = %v, %v", p, err)
	}
	if got, want := r.Names(), []string{"claude", "script"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}

	_, err = r.Get("openia")
	if !errors.Is(err, provider.ErrUnknownProvider) {
		t.Fatalf("Get(openia) error = %v, want ErrUnknownProvider", err)
	}
	for _, want := range []string{`"openia"`, "claude, script"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Get(openia) error %q does not mention %s", err, want)
		}
	}
}

func TestRegistryZeroValueAndReplace(t *testing.T) {
	var r provider.Registry
	if names := r.Names(); len(names) != 0 {
		t.Errorf("empty registry Names() = %q", names)
	}
	_, err := r.Get("script")
	if !errors.Is(err, provider.ErrUnknownProvider) || !strings.Contains(err.Error(), "none registered") {
		t.Errorf("Get on empty registry: %v", err)
	}

	first, second := &namedProvider{"script"}, &namedProvider{"script"}
	r.Register(first)
	r.Register(second)
	p, err := r.Get("script")
	if err != nil || p != provider.Provider(second) {
		t.Errorf("after re-Register, Get = %p, %v; want the second provider %p", p, err, second)
	}
	if got := r.Names(); !slices.Equal(got, []string{"script"}) {
		t.Errorf("Names() = %q", got)
	}
}

func TestRegistryRegisterPanicsOnBadProvider(t *testing.T) {
	for _, p := range []provider.Provider{nil, namedProvider{""}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%#v) did not panic", p)
				}
			}()
			new(provider.Registry).Register(p)
		}()
	}
}

func TestRegistryConcurrent(t *testing.T) {
	r := provider.NewRegistry(namedProvider{"script"})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			r.Register(namedProvider{fmt.Sprintf("p%d", i)})
		}()
		go func() {
			defer wg.Done()
			for range 100 {
				if _, err := r.Get("script"); err != nil {
					t.Error(err)
					return
				}
				r.Names()
			}
		}()
	}
	wg.Wait()
	if n := len(r.Names()); n != 9 {
		t.Errorf("len(Names()) = %d, want 9", n)
	}
}
