#!/usr/bin/env bash
# Fails when the tracked tree is larger than the GPU machine can take: the device tool sends the
# working tree and refuses more than 64 MiB, and a build or wheels carried along need room too.
# docs/DEVELOPING.md has the rule and how the large data is stored.
set -euo pipefail
cd "$(dirname "$0")/.."
limit_mib=${KILN_TREE_LIMIT_MIB:-58}
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-tree-size: not a git checkout, nothing to check"; exit 0
fi
bytes=$(git ls-files -z | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
if [ "$bytes" -gt $((limit_mib * 1048576)) ]; then
  echo "check-tree-size: the tracked tree is $mib MiB, over the $limit_mib MiB limit (docs/DEVELOPING.md)" >&2
  git ls-files -z | xargs -0 -r du -b -- | sort -rn | head -10 >&2
  exit 1
fi
echo "check-tree-size: tracked tree $mib MiB (limit $limit_mib MiB)"
