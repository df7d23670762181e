#!/usr/bin/env bash
# Side by side in one run: Go text/template (oracle bench-template, modes preparsed and sveltos)
# and ours (examples/bench, per render starting from the decoded event, a Doc: `shared` =
# event_data_shared + render, `event` = Template::render_event) on the same fixtures. Go and
# ours are interleaved so that both see the same machine load; every figure is the best of three
# runs (on a shared machine the minimum is the least disturbed one); each row is one round,
# with the 1-minute load average. Ratios are Go's time divided by ours.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
oracle="$(bash "$here/../../../../shared/oracle/build.sh" | tail -n 1)"
ours="${CARGO_TARGET_DIR:-$here/../../../target}/release/examples/bench"
[ -x "$ours" ] || { echo "build first: cargo build --release -p sluice-template --example bench" >&2; exit 1; }
ours() { "$ours" "$here/data/$1.json" "$2" "$3" | ns; }
ns() { python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["ns_per_render"])'; }
go() {
  python3 -c 'import json,sys; f=json.load(open(sys.argv[1])); f.update(iterations=int(sys.argv[2]), mode=sys.argv[3]); print(json.dumps(f))' \
    "$here/data/$1.json" "$2" "$3" | "$oracle" bench-template | ns
}
best() { # best of three: best CMD...
  local a b c; a=$("$@"); b=$("$@"); c=$("$@")
  printf '%s\n' "$a" "$b" "$c" | sort -n | head -n 1
}
ratio() { python3 -c "print('%.1f' % ($1 / $2))"; }
printf '%-16s %9s %9s %9s %9s  %7s %7s %7s %7s  %s\n' fixture go_prep go_svel shared event \
  prep/sh svel/sh prep/ev svel/ev load
for name in networkpolicy ingress-50 helm-values-200; do
  iters=50000; [ "$name" != networkpolicy ] && iters=2000
  for round in 1 2 3; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    p=$(best go "$name" "$iters" preparsed)
    sh=$(best ours "$name" "$iters" shared)
    s=$(best go "$name" $((iters / 20)) sveltos)
    ev=$(best ours "$name" "$iters" event)
    printf '%-16s %9s %9s %9s %9s  %7s %7s %7s %7s  %s\n' "$name" "$p" "$s" "$sh" "$ev" \
      "$(ratio "$p" "$sh")" "$(ratio "$s" "$sh")" "$(ratio "$p" "$ev")" "$(ratio "$s" "$ev")" "$load"
  done
done
