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
