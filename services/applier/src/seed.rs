//! The pairs' indexes at start, from the first lists of the watches of what sluice wrote (ADR
//! 0033, 0039). Each owned kind's watch lists every object sluice wrote of the kind at start; the
//! first unit of each pair would list the same objects again, by the pair's labels. Instead the
//! watches' first lists are grouped by pair as they come, and once every kind's is complete the
//! units, which waited for it, take each pair's index and adoption snapshot from it: one listing
//! at start instead of two. Exact: the lists are consistent reads of the most recent state, and
//! no unit writes before they are installed. A seed that does not complete in time (a kind not
//! served, a watch that keeps failing) is abandoned, and each pair is listed on first use as
//! without one.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use sluice_domain::naming;
use sluice_kube::watch::{FirstList, FirstListObserver};

use crate::adopt::{Adoptable, Owned};
use crate::index::Listing;

/// How long after the applier starts units wait for the seed before each pair is listed as
/// without one.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// What one pair's listed objects say: its index and its adoption snapshot, built a listed
/// object at a time (by a pair's LIST or from the watches' first lists).
#[derive(Default)]
pub(crate) struct PairSeed {
    pub listing: Listing,
    pub adoptable: Adoptable,
}

impl PairSeed {
    /// Takes one listed object (its metadata is enough) of the listed `kind`.
    pub(crate) fn add(&mut self, kind: &str, object: &Value) {
        self.listing.add(kind, object);
        self.adoptable.add(Owned::of(kind, object));
    }

    /// Takes what another listing (of another kind) found.
    pub(crate) fn extend(&mut self, other: PairSeed) {
        self.listing.extend(other.listing);
        self.adoptable.extend(other.adoptable);
    }
}

/// The seed being gathered from the watches' first lists, one per owned kind.
pub(crate) struct Seed {
    state: Mutex<State>,
    settled: tokio::sync::watch::Sender<bool>,
    /// When units stop waiting for it ([`PATIENCE`] after it was made).
    deadline: tokio::time::Instant,
}

#[derive(Default)]
struct State {
    /// Each kind's pairs as its first list showed them so far, until it is complete.
    listing: HashMap<&'static str, HashMap<String, PairSeed>>,
    /// The complete kinds' pairs.
    pairs: HashMap<String, PairSeed>,
    kinds_left: usize,
    abandoned: bool,
    installed: bool,
}

impl Seed {
    /// A seed of the first lists of `kinds` kinds.
    pub(crate) fn new(kinds: usize) -> Seed {
        Seed {
            state: Mutex::new(State {
                kinds_left: kinds,
                ..State::default()
            }),
            settled: tokio::sync::watch::Sender::new(kinds == 0),
            deadline: tokio::time::Instant::now() + PATIENCE,
        }
    }

    /// What a kind's watch shows of its first list.
    pub(crate) fn observer(self: &std::sync::Arc<Self>, kind: &'static str) -> FirstListObserver {
        let seed = self.clone();
        Box::new(move |seen| seed.on_first_list(kind, seen))
    }

    fn on_first_list(&self, kind: &'static str, seen: FirstList<'_>) {
        let mut state = self.lock();
        if state.abandoned || state.installed {
            return;
        }
        match seen {
            FirstList::Restarted => {
                state.listing.insert(kind, HashMap::new());
            }
            FirstList::Object(object) => {
                if let Some(pair) = pair_of(object) {
                    state
                        .listing
                        .entry(kind)
                        .or_default()
                        .entry(pair)
                        .or_default()
                        .add(kind, object);
                }
            }
            FirstList::Done => {
                let listed = state.listing.remove(kind).unwrap_or_default();
                for (pair, seed) in listed {
                    state.pairs.entry(pair).or_default().extend(seed);
                }
                state.kinds_left = state.kinds_left.saturating_sub(1);
                if state.kinds_left == 0 {
                    self.settled.send_replace(true);
                }
            }
        }
    }

    /// No seed after all (a kind is not served yet): each pair is listed on first use.
    pub(crate) fn abandon(&self) {
        let mut state = self.lock();
        if !state.installed {
            state.abandoned = true;
            state.listing.clear();
            state.pairs.clear();
        }
        self.settled.send_replace(true);
    }

    /// Whether a unit would wait for the seed now: it is neither complete nor abandoned, and
    /// its patience has not run out. A repair, which the runner runs between its steps, is put
    /// off instead of waiting: the watches whose first lists complete the seed are not read
    /// while it runs.
    pub(crate) fn keeps_waiting(&self) -> bool {
        !*self.settled.borrow() && tokio::time::Instant::now() < self.deadline
    }

    /// Waits until the seed is complete or abandoned, at most until [`PATIENCE`] after it was
    /// made (then it is abandoned); the first caller after that gives it to `install`, under
    /// the seed's lock, so that every other caller returns only once it is installed. True when
    /// it was installed.
    pub(crate) async fn settle(&self, install: impl FnOnce(HashMap<String, PairSeed>)) -> bool {
        let mut settled = self.settled.subscribe();
        let waited = tokio::time::timeout_at(self.deadline, settled.wait_for(|done| *done)).await;
        if waited.is_err() {
            tracing::warn!(
                patience = ?PATIENCE,
                "the first lists of what sluice wrote did not complete in time: each pair is listed on first use"
            );
            self.abandon();
        }
        let mut state = self.lock();
        if !state.abandoned && !state.installed {
            state.installed = true;
            install(std::mem::take(&mut state.pairs));
        }
        state.installed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The key of the pair (trigger and cluster) `object` was written for, by the owner labels it
/// carries; `None` for an object without all of them (no pair's LIST selects it).
fn pair_of(object: &Value) -> Option<String> {
    let labels = object.pointer("/metadata/labels")?.as_object()?;
    let mut pair = BTreeMap::new();
    for key in naming::OWNER_LABEL_KEYS {
        pair.insert(key.to_string(), labels.get(key)?.as_str()?.to_string());
    }
    Some(crate::executor::pair_key(&pair))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, name: &str, cluster: &str) -> Value {
        json!({"kind": kind, "apiVersion": "v1", "metadata": {"name": name, "namespace": "ns",
        "labels": {
            naming::LABEL_EVENT_TRIGGER: "t",
            naming::LABEL_CLUSTER_NAMESPACE: "default",
            naming::LABEL_CLUSTER_NAME: cluster,
            naming::LABEL_CLUSTER_TYPE: "Sveltos",
            naming::LABEL_RESOURCE_NAME: name,
        }}})
    }

    /// How many objects each pair's index holds.
    fn held(seeded: HashMap<String, PairSeed>) -> BTreeMap<String, usize> {
        seeded
            .into_iter()
            .map(|(pair, seed)| {
                (
                    pair,
                    seed.listing.index().known(&BTreeMap::new(), true).len(),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn the_first_lists_are_grouped_by_pair_and_installed_once_when_every_kind_is_done() {
        let seed = std::sync::Arc::new(Seed::new(2));
        let mut profiles = seed.observer("ClusterProfile");
        let mut maps = seed.observer("ConfigMap");
        assert!(seed.keeps_waiting(), "nothing listed yet");
        profiles(FirstList::Restarted);
        profiles(FirstList::Object(&object("ClusterProfile", "stale", "a")));
        // the list restarts: what it showed before is void
        profiles(FirstList::Restarted);
        profiles(FirstList::Object(&object("ClusterProfile", "p1", "a")));
        profiles(FirstList::Object(&object("ClusterProfile", "p2", "b")));
        // an object without the owner labels belongs to no pair
        profiles(FirstList::Object(
            &json!({"metadata": {"name": "x", "labels": {}}}),
        ));
        profiles(FirstList::Done);
        maps(FirstList::Restarted);
        maps(FirstList::Object(&object("ConfigMap", "c1", "a")));
        assert!(!*seed.settled.borrow(), "a kind is still listing");
        maps(FirstList::Done);
        assert!(*seed.settled.borrow());

        assert!(!seed.keeps_waiting(), "complete");
        let mut installed = None;
        assert!(seed.settle(|pairs| installed = Some(held(pairs))).await);
        let installed = installed.expect("installed");
        assert_eq!(installed.values().copied().collect::<Vec<_>>(), [2, 1]);
        // once only
        assert!(seed.settle(|_| panic!("installed twice")).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_seed_is_waited_for_until_its_patience_after_it_was_made() {
        let seed = Seed::new(1);
        tokio::time::advance(PATIENCE - Duration::from_secs(1)).await;
        assert!(seed.keeps_waiting());
        let began = tokio::time::Instant::now();
        assert!(!seed.settle(|_| panic!("nothing to install")).await);
        assert_eq!(
            began.elapsed(),
            Duration::from_secs(1),
            "its patience ran from its making"
        );
        assert!(!seed.keeps_waiting(), "abandoned");
    }

    #[tokio::test]
    async fn an_abandoned_seed_installs_nothing() {
        let seed = Seed::new(1);
        seed.abandon();
        assert!(!seed.settle(|_| panic!("nothing to install")).await);
    }
}
