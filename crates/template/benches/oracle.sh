#!/usr/bin/env bash
# Runs the Go oracle's bench-template (modes preparsed and sveltos) on the same fixtures as
# `cargo bench -p sluice-template --bench render`. Needs Go (see shared/oracle/build.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
oracle="$(bash "$here/../../../../shared/oracle/build.sh" | tail -n 1)"
for name in networkpolicy ingress-50 helm-values-200; do
  for mode in preparsed sveltos; do
    if [ "$mode" = preparsed ]; then iters=100000; else iters=3000; fi
    [ "$name" != networkpolicy ] && iters=$((iters / 10))
    printf '%-16s %-9s ' "$name" "$mode"
    python3 -c 'import json,sys; f=json.load(open(sys.argv[1])); f.update(iterations=int(sys.argv[2]), mode=sys.argv[3]); print(json.dumps(f))' \
      "$here/data/$name.json" "$iters" "$mode" | "$oracle" bench-template
  done
done
