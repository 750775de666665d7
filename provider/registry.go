package provider

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Registry maps provider names to providers. The zero value is an empty
// registry ready to use. It is safe for concurrent use; lookups only take a
// read lock.
type Registry struct {
	mu        sync.RWMutex // guards the field below
	providers map[string]Provider
}

// NewRegistry returns a registry holding ps.
func NewRegistry(ps ...Provider) *Registry {
	r := &Registry{}
	for _, p := range ps {
		r.Register(p)
	}
	return r
}

// Register adds p under p.Name(), replacing any provider already registered
// under that name. It panics if p is nil or its name is empty: both are
// programming errors.
func (r *Registry) Register(p Provider) {
	if p == nil {
		panic("provider: Register of a nil provider")
	}
	name := p.Name()
	if name == "" {
		panic("provider: Register of a provider with an empty name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.providers == nil {
		r.providers = make(map[string]Provider)
	}
	r.providers[name] = p
}

// Get returns the provider registered under name. Errors: ErrUnknownProvider,
// with the names that are known.
func (r *Registry) Get(name string) (Provider, error) {
	r.mu.RLock()
	p, ok := r.providers[name]
	r.mu.RUnlock()
	if ok {
		return p, nil
	}
	known := "none registered"
	if names := r.Names(); len(names) > 0 {
		known = "known: " + strings.Join(names, ", ")
	}
	return nil, fmt.Errorf("%w %q (%s)", ErrUnknownProvider, name, known)
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.providers))
	for name := range r.providers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
