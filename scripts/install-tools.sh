#!/usr/bin/env bash
# Installs what the tests need, when it is missing, into .tools/ (Go tools)
# or with apt-get (system packages). Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
STATICCHECK_VERSION=$(sed -n 's/^STATICCHECK_VERSION := //p' Makefile)

if [ ! -x "$TOOLS/bin/staticcheck" ] || ! "$TOOLS/bin/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  echo "installing staticcheck $STATICCHECK_VERSION into .tools/bin"
  GOBIN="$TOOLS/bin" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

# System packages the tests run for real: bubblewrap (the sandbox tests),
# rsync (the backup-while-busy test), tmux (substrat top in a real
# terminal), git (worktree workspaces) and openssh-server (a real sshd on
# loopback, for the SSH executor's tests). One apt-get for whatever is
# missing.
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v git >/dev/null 2>&1 || missing+=(git)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
# openssl and curl: scripts/k8s-control-plane.sh (the Kubernetes
# executor's tests) makes its certificates and probes with them.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} with apt-get"
  SUDO=
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
  $SUDO apt-get update
  $SUDO apt-get install -y "${missing[@]}"
fi

# The Claude Code CLI, at a pinned version, for the end-to-end test of the
# claude provider (cmd/substrat/claude_e2e_test.go), which runs it offline
# against a loopback fake of the Anthropic API. npm only; the package ships
# its native binary.
CLAUDE_CODE_VERSION=2.1.328
if [ ! -x "$TOOLS/npm/node_modules/.bin/claude" ] || ! "$TOOLS/npm/node_modules/.bin/claude" --version 2>/dev/null | grep -q "^$CLAUDE_CODE_VERSION "; then
  echo "installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into .tools/npm"
  mkdir -p "$TOOLS/npm"
  npm install --prefix "$TOOLS/npm" --no-audit --no-fund --save-exact "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"
fi

# The Codex CLI, pinned, for the codex provider's tests (provider/codex),
# which run it offline against a loopback fake of the Responses API.
CODEX_VERSION=0.169.0
if [ ! -x "$TOOLS/npm/node_modules/.bin/codex" ] || ! "$TOOLS/npm/node_modules/.bin/codex" --version 2>/dev/null | grep -q " $CODEX_VERSION$"; then
  echo "installing @openai/codex@$CODEX_VERSION into .tools/npm"
  mkdir -p "$TOOLS/npm"
  npm install --prefix "$TOOLS/npm" --no-audit --no-fund --save-exact "@openai/codex@$CODEX_VERSION"
fi

# The Gemini CLI, pinned, for the gemini provider's tests (provider/gemini),
# which run it offline against a loopback fake of the Gemini API.
GEMINI_VERSION=0.61.0
if [ ! -x "$TOOLS/npm/node_modules/.bin/gemini" ] || ! "$TOOLS/npm/node_modules/.bin/gemini" --version 2>/dev/null | grep -q "^$GEMINI_VERSION$"; then
  echo "installing @google/gemini-cli@$GEMINI_VERSION into .tools/npm"
  mkdir -p "$TOOLS/npm"
  npm install --prefix "$TOOLS/npm" --no-audit --no-fund --save-exact "@google/gemini-cli@$GEMINI_VERSION"
fi
