package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// sandboxFor returns the provider.Config.Sandbox hook of an agent: every
// provider process runs inside the agent's workspace. The program itself,
// and what the provider says it needs, are bound at their own paths when
// they live outside the system directories; the agent's tool socket is
// bound when the provider's MCP server may need it.
func (h *host) sandboxFor(sess *fsstore.Session) provider.SandboxFunc {
	if sess.Workspace == "" {
		return nil
	}
	if hostName := fsstore.ExecutorHost(sess.Executor); hostName != "" {
		return h.remoteSandbox(sess, hostName)
	}
	if target := fsstore.ExecutorKubernetes(sess.Executor); target != "" {
		return h.k8sSandbox(sess, target)
	}
	return func(ctx context.Context, p provider.Process, needs provider.SandboxNeeds) (provider.Process, error) {
		spec, argv, err := h.sandboxSpec(sess, p, needs)
		if err != nil {
			return provider.Process{}, err
		}
		return sandboxed(spec, argv, p.Dir)
	}
}

// sandboxSpec returns the sandbox that agent sess's provider process p
// runs in, and the command line inside it.
func (h *host) sandboxSpec(sess *fsstore.Session, p provider.Process, needs provider.SandboxNeeds) (bwrap.Spec, []string, error) {
	spec, err := h.core.AgentSpec(sess)
	if err != nil {
		return spec, nil, err
	}
	if needs.Network && !spec.Network {
		return spec, nil, fmt.Errorf("provider %s must reach its API over the network, and workspace %s has no network access; "+
			"use a workspace created with --network, or the script provider", sess.Provider, sess.Workspace)
	}
	spec.Env = map[string]string{}
	for _, kv := range p.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			spec.Env[k] = v
		}
	}
	// The program at its own path; a relative one is the workspace's.
	prog := p.Path
	ro := needs.ReadOnly
	if filepath.IsAbs(prog) {
		ro = append([]string{prog}, ro...)
	}
	rw := needs.ReadWrite
	if needs.ToolSocket {
		sock, err := h.toolSocket(sess.ID)
		if err != nil {
			return spec, nil, fmt.Errorf("the tool socket of %s: %w", sess.Name, err)
		}
		rw = append(append([]string(nil), rw...), sock)
	}
	if spec.Mounts, err = addBinds(spec, h.store.Layout().Home, ro, rw); err != nil {
		return spec, nil, err
	}
	return spec, append([]string{prog}, p.Args[1:]...), nil
}

// sandboxed is the process that runs argv inside the sandbox spec, bwrap
// itself starting in dir: launch.Command's, as data.
func sandboxed(spec bwrap.Spec, argv []string, dir string) (provider.Process, error) {
	path, err := launch.LookPath()
	if err != nil {
		return provider.Process{}, err
	}
	plan, err := bwrap.PlanCommand(path, spec, argv)
	if err != nil {
		return provider.Process{}, err
	}
	files, err := launch.Open(plan)
	if err != nil {
		return provider.Process{}, err
	}
	return provider.Process{Path: plan.Argv[0], Args: plan.Argv, Env: plan.Env, Dir: dir, Files: files}, nil
}

// addBinds returns spec's mounts plus host paths bound at their own paths:
// ro read-only, rw read-write, parents before what lies inside them (so
// that a read-write HOME inside a read-only package is still writable).
// Read-only paths in the system directories, which the sandbox shows
// anyway, and repeats are skipped. A path the sandbox cannot bind, or one
// the workspace already binds something else at, is an error: the
// provider would not see what it needs.
//
// A path in the Substrat home (a CLI's HOME, its MCP config, the tool
// socket) is resolved beneath the home, with no symlink below it; any
// other (the CLI's package, the substrat binary; providers name them with
// their symlinks resolved) with no symlink at all.
func addBinds(spec bwrap.Spec, home string, ro, rw []string) ([]bwrap.Mount, error) {
	taken := map[string]bool{}
	for _, g := range spec.Grants() {
		taken[g.Target] = true
	}
	seen := map[string]bool{}
	var added []bwrap.Mount
	add := func(p string, readOnly bool) error {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("cannot bind %q into the sandbox: not an absolute path", p)
		}
		p = filepath.Clean(p)
		if readOnly && bwrap.SystemVisible(p) {
			return nil
		}
		if err := bwrap.ValidateTarget(p); err != nil {
			return fmt.Errorf("cannot bind %s into the sandbox: %v", p, err)
		}
		if taken[p] {
			return fmt.Errorf("cannot bind %s into the sandbox: the workspace binds something else there", p)
		}
		if !seen[p] {
			seen[p] = true
			src := bwrap.Source{Host: p}
			if p != home && strings.HasPrefix(p, home+"/") {
				src.Anchor = home
			}
			added = append(added, bwrap.Mount{Source: src, Target: p, ReadOnly: readOnly})
		}
		return nil
	}
	for _, p := range rw {
		if err := add(p, false); err != nil {
			return nil, err
		}
	}
	for _, p := range ro {
		if err := add(p, true); err != nil {
			return nil, err
		}
	}
	depth := func(p string) int { return strings.Count(p, "/") }
	sort.SliceStable(added, func(i, j int) bool { return depth(added[i].Target) < depth(added[j].Target) })
	return append(append([]bwrap.Mount(nil), spec.Mounts...), added...), nil
}
