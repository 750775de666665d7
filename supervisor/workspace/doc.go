// Package workspace is the workspace model and its plain-file store, and
// the step from a workspace to the bwrap sandbox its processes run in.
//
// # On disk
//
// A workspace lives in HOME/workspaces/<scope>/<name>/, where scope is USER
// or the id of the agent that owns it and name follows the rules of agent
// names (and does not start with "."):
//
//	workspaces/<scope>/<name>/
//	  workspace.json   the description below, replaced only by atomic rename
//	  root/            the workspace's files, bound at /workspace (not in a view)
//	  shell-state/     the persisted shell state of bwrap.Shell (made on use)
//
// workspace.json is an indented JSON object:
//
//	{
//	  "version": 1,
//	  "scope": "USER",
//	  "name": "proj",
//	  "network_access": false,
//	  "links": [
//	    {"host_path": "/home/u/src", "mount_path": "/src", "mode": "ro"}
//	  ],
//	  "view": {"source_scope": "USER", "source_name": "base", "subdir": "docs", "mode": "ro"},
//	  "created_at": "2026-11-22T10:00:00Z"
//	}
//
// scope and name repeat the directory's; unknown fields are refused. links
// bind host_path (absolute, stored with its symlinks resolved) at
// mount_path inside the sandbox, read-only ("ro") or read-write ("rw").
// view is present only in a view: a workspace with no root/ of its own,
// whose sandbox root is the source workspace's root/ (or the subdir of it),
// bound with the view's mode. A view of a view is stored as a view of the
// first source, read-only if either was.
//
// A workspace is created under the temporary name .tmp-<name> beside its
// final place, root/ first and workspace.json last, and renamed into place;
// a crash leaves only a .tmp- directory, which List ignores and Sweep
// removes. A directory without workspace.json is not a workspace. Delete
// renames the directory to the temporary name before removing it.
//
// # Escapes
//
// Paths that end up bound into a sandbox are checked twice: when they are
// stored (a link's host path is resolved; a view's subdir must resolve
// inside the source root) and again by Workspace.Spec just before a sandbox
// is built, because a process with write access could have replaced a
// directory with a symlink in between. Whether an agent may link a host
// path at all is bwrap.CheckLink's decision, against the grants of the
// agent's own workspace.
package workspace
