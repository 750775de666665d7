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
//	  shell-state/     the persisted shell state of launch.Shell (made on use)
//	  git/             a git workspace's git directory (see git.go), bound
//	                   at /workspace/.git; root/.git is an empty directory
//	  git-creating     a git workspace being made: its Git record
//	  git-published    the commit its branch was last published at
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
// A git workspace's workspace.json also has
//
//	"git": {"repo": "/home/u/src/app", "common_dir": "/home/u/src/app/.git",
//	        "branch": "substrat/team", "base": "<commit id>", "home_id": "<uuid>"}
//
// home_id is the id of the home the workspace was made in (HOME/home.json;
// absent in workspaces made before homes had ids). A copy of the home (a
// backup, made by 'substrat backup' or by hand) holds the same clone, and
// the clone's objects/info/alternates, its remote origin and "repo" still
// name the user's repository, whose branch the original home publishes:
// git work from the copy would move the original's branch. So a git
// workspace whose home_id is not its home's (or, without home_id, one in
// a home marked as a copy) is refused for publish, diff, delete (without
// --force, or with --delete-branch), a child's clone and an agent's
// sandbox, with a message naming the home it was copied from. 'substrat
// workspace reattach WS' makes it this home's (after a restore whose
// original is gone); 'substrat workspace delete WS --force' removes the
// copy's files and leaves the branch alone. 'substrat fsck' reports each.
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
// A process in one sandbox can write what its workspace grants, and so can
// swap a directory that another sandbox binds for a symlink to "/". No
// path is therefore trusted by name when it is bound. Spec names, for each
// bind, how launch.Command resolves it as the sandbox is built: a root/
// beneath the home, with no symlink below it; a view's subdir beneath the
// source's root/, following only symlinks that stay inside it; a link's
// host path with no symlink in it at all. The descriptors it opens are
// what bwrap binds (see package bwrap).
//
// A link's host path is stored as a real path: Store.Link refuses one
// with a symlink in it. An agent's link comes resolved by bwrap.CheckLink
// (beneath the grant of its own workspace that the path lies in); a path
// a user names is resolved first with ResolveHostPath. Spec also looks at
// the host by name, to fail early with a message that says what to do (a
// link whose path has become a symlink: unlink it and link it again), but
// only the resolution at build time is the guarantee.
package workspace
