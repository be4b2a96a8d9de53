#!/usr/bin/env bash
# Runs every native Go fuzz target in the module for $FUZZTIME (default 30s) each.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-30s}
found=0
while IFS= read -r f; do
  dir=$(dirname "$f")
  for t in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$f" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    found=$((found + 1))
    echo "fuzz: ./$dir $t for $FUZZTIME"
    go test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" "./$dir"
  done
done < <(git ls-files '*_test.go' 2>/dev/null | xargs -r grep -l '^func Fuzz' || true)
echo "fuzz: $found target(s) ran"
