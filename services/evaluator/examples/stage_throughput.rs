//! Throughput of the evaluator's pure stage (`stage::Evaluator`): object changes per second
//! across 100 EventSources, match-set bookkeeping and publishing decisions included, no bus.
//!
//! Workload (all numbers are flags): `--clusters` managed clusters, every one selected by 100
//! EventTriggers, one per EventSource, so every EventSource is deployed to every cluster. The
//! EventSources watch `--kinds` kinds (EventSource i watches kind i mod kinds), so one change
//! is evaluated by 100/kinds EventSources. Of every ten EventSources four are label filters only
//! (`labelFilters` tier=web), three are CEL (alternately a label rule and a port rule) and
//! three are Lua (alternately the seed label script and the seed https-port script). Each
//! cluster starts with `--objects` objects per kind (Service-shaped, half labelled
//! `sveltos: fv`, a third `tier: web`); then `--changes` changes, round robin over clusters,
//! kinds and objects, each a new resourceVersion and status, and one in `--flip` also flips the
//! labels and the https port, which moves the object in or out of most match sets.
//!
//! ```text
//! cargo run --release -p sluice-evaluator --example stage_throughput -- --kinds 10
//! ```
//!
//! Prints the boot (initial evaluation of every object) and two runs over the same changes:
//! one `on_change` per change, and `on_changes` in batches of `--batch`.

use std::time::Instant;

use sluice_evaluator::Evaluator;
use sluice_proto::v1 as pb;
use workload::{change, config, EVENT_SOURCES};

#[path = "common/workload.rs"]
mod workload;

// The allocator the evaluator binary runs with (`src/main.rs`): with glibc malloc the stage
// spends a third of its time in malloc's free lists, which the service does not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Options {
    clusters: usize,
    kinds: usize,
    objects: usize,
    changes: usize,
    flip: usize,
    batch: usize,
}

fn options() -> Options {
    let mut o = Options {
        clusters: 10,
        kinds: 10,
        objects: 200,
        changes: 200_000,
        flip: 10,
        batch: 256,
    };
    workload::parse_flags(&mut [
        ("--clusters", &mut o.clusters),
        ("--kinds", &mut o.kinds),
        ("--objects", &mut o.objects),
        ("--changes", &mut o.changes),
        ("--flip", &mut o.flip),
        ("--batch", &mut o.batch),
    ]);
    o
}

fn main() {
    let o = options();
    let mut initial = Vec::new();
    for c in 0..o.clusters {
        for k in 0..o.kinds {
            for n in 0..o.objects {
                initial.push(change(c, k, n, 1, false));
            }
        }
    }
    // Round robin over clusters, then kinds, then objects; every `flip`-th change flips the
    // object's labels and port relative to its current state.
    let mut flipped = vec![false; o.clusters * o.kinds * o.objects];
    let changes: Vec<(pb::ResourceChange, u64)> = (0..o.changes)
        .map(|i| {
            let c = i % o.clusters;
            let k = (i / o.clusters) % o.kinds;
            let n = (i / (o.clusters * o.kinds)) % o.objects;
            let slot = (c * o.kinds + k) * o.objects + n;
            if o.flip > 0 && i.is_multiple_of(o.flip) {
                flipped[slot] = !flipped[slot];
            }
            (change(c, k, n, i + 2, flipped[slot]), i as u64 + 2)
        })
        .collect();
    let per_change = EVENT_SOURCES / o.kinds;
    println!(
        "stage throughput: {EVENT_SOURCES} EventSources x {} clusters ({} pairs), {} kinds \
         ({per_change} EventSources evaluate each change), {} objects, {} changes, 1 in {} flips",
        o.clusters,
        EVENT_SOURCES * o.clusters,
        o.kinds,
        initial.len(),
        o.changes,
        o.flip
    );

    for mode in ["one by one", "batched"] {
        let mut stage = Evaluator::new(config(o.clusters, o.kinds));
        let start = Instant::now();
        for change in &initial {
            stage.load_object(change);
        }
        let boot = stage.recompute_all(1);
        let boot_secs = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut published = 0usize;
        if mode == "one by one" {
            for (change, sequence) in &changes {
                published += stage.on_change(change, *sequence).len();
            }
        } else {
            for batch in changes.chunks(o.batch.max(1)) {
                published += stage.on_changes(batch).len();
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{mode:<10}: boot {} objects in {boot_secs:.2} s ({} units); {} changes in {secs:.2} s = \
             {:.0} changes/s ({:.0} evaluations/s), {published} match units published",
            initial.len(),
            boot.len(),
            o.changes,
            o.changes as f64 / secs,
            (o.changes * per_change) as f64 / secs,
        );
    }
}
