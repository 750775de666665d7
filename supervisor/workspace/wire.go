package workspace

import "github.com/substrat/substrat/supervisor/api"

// Wire is w as the wire contract carries it (api links none of this
// package's code). Nil gives nil.
func (w *Workspace) Wire() *api.Workspace {
	if w == nil {
		return nil
	}
	out := &api.Workspace{Version: w.Version, Scope: w.Scope, Name: w.Name, NetworkAccess: w.NetworkAccess,
		View: (*api.View)(w.View), Git: (*api.GitInfo)(w.Git), CreatedAt: w.CreatedAt}
	if w.Links != nil {
		out.Links = make([]api.Link, len(w.Links))
		for i, l := range w.Links {
			out.Links[i] = api.Link(l)
		}
	}
	return out
}
