#!/usr/bin/env bash
# refresh-corpus.sh: the conformance corpus and the seed documents that the tests read live in
# tests/corpus/, so a clone passes its tests alone. Their source is the shared folder beside the
# repository (../shared/conformance, ../shared/seeds). With no argument this copies them in;
# with --check it fails when the copy differs from the source (CI runs that where the source
# exists).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
shared="${SLUICE_SHARED:-../shared}"
corpus=tests/corpus

if [[ ! -d "${shared}/conformance" || ! -d "${shared}/seeds" ]]; then
    echo "refresh-corpus: ${shared} has no conformance/ and seeds/: nothing to compare with" >&2
    [[ "${1:-}" == --check ]] && exit 0
    exit 1
fi

# The oracle's generator script stays with the oracle; the cases and their README come over.
copy() {
    local into="$1"
    mkdir -p "${into}"
    cp -r "${shared}/conformance/eventsources" "${shared}/conformance/templates" \
        "${shared}/conformance/README.md" "${into}/"
}

if [[ "${1:-}" == --check ]]; then
    scratch="$(mktemp -d)"
    trap 'rm -rf "${scratch}"' EXIT
    copy "${scratch}/conformance"
    cp -r "${shared}/seeds" "${scratch}/seeds"
    if ! diff -r "${scratch}/conformance" "${corpus}/conformance" \
        || ! diff -r "${scratch}/seeds" "${corpus}/seeds"; then
        echo "refresh-corpus: tests/corpus differs from ${shared}: run scripts/refresh-corpus.sh" >&2
        exit 1
    fi
    echo "refresh-corpus: tests/corpus matches ${shared}"
    exit 0
fi

rm -rf "${corpus}/conformance" "${corpus}/seeds"
copy "${corpus}/conformance"
cp -r "${shared}/seeds" "${corpus}/seeds"
chmod -R u+w "${corpus}"
echo "refresh-corpus: copied ${shared}/conformance and ${shared}/seeds into ${corpus}"
