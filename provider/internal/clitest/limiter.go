package clitest

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// Limit is an answer a Limiter gives instead of the fake API's: a status
// (429), headers (Retry-After...) and a JSON body, as the real API sends.
type Limit struct {
	Status int
	Header map[string]string
	Body   string
}

// Limiter is a loopback front of a fake API that answers a request with
// what its function returns, or passes it on to the fake when that is nil.
// Its URL has the fake URL's path, so it stands in for it.
type Limiter struct {
	URL string

	mu      sync.Mutex // guards the fields below
	limit   func(r *http.Request) *Limit
	limited int
}

// NewLimiter starts a Limiter in front of the fake at fakeURL; it is
// closed when the test ends.
func NewLimiter(t testing.TB, fakeURL string, limit func(r *http.Request) *Limit) *Limiter {
	t.Helper()
	u, err := url.Parse(fakeURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	l := &Limiter{limit: limit}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		ans := l.limit(r)
		if ans != nil {
			l.limited++
		}
		l.mu.Unlock()
		if ans == nil {
			proxy.ServeHTTP(w, r)
			return
		}
		for k, v := range ans.Header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ans.Status)
		w.Write([]byte(ans.Body))
	}))
	t.Cleanup(srv.Close)
	l.URL = srv.URL + u.Path
	return l
}

// SetLimit replaces the function.
func (l *Limiter) SetLimit(limit func(r *http.Request) *Limit) {
	l.mu.Lock()
	l.limit = limit
	l.mu.Unlock()
}

// Limited is the number of requests answered with a Limit so far.
func (l *Limiter) Limited() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limited
}
