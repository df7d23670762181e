//! What the management cluster holds of each (EventTrigger, cluster) pair, grouped by unit, so
//! that applying or removing one unit needs no LIST (issue 20): the pair is listed once by its
//! owner labels when first needed, each listed object is filed under its unit's labels (as
//! `plan::Owner` selects them, never parsed from names: label values may be hashed, ADR 0004),
//! and every unit's outcome replaces its group. A LIST that ran while units of the pair were
//! written is completed with what they wrote meanwhile (the journal), so it is exact when
//! installed. Pure bookkeeping; the executor does the IO.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use sluice_domain::naming;

use crate::plan::{object_id, Known, ObjectId};

/// The labels that tell a pair's units apart: an object's values of these are its unit's key.
const UNIT_LABELS: [&str; 4] = [
    naming::LABEL_CE_SOURCE,
    naming::LABEL_CE_SUBJECT,
    naming::LABEL_RESOURCE_NAMESPACE,
    naming::LABEL_RESOURCE_NAME,
];

/// A unit's key within its pair: its own labels (`Unit::labels`; empty for the main unit).
pub(crate) type UnitLabels = std::collections::BTreeMap<String, String>;

/// The unit a listed object belongs to: the main unit's (empty) unless it carries a CloudEvent
/// source or a resource name (as `plan::Owner` decides), else its unit labels.
pub(crate) fn unit_of(object: &Value) -> UnitLabels {
    let labels = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object);
    let value = |key: &str| labels?.get(key)?.as_str().map(str::to_string);
    if value(naming::LABEL_CE_SOURCE).is_none() && value(naming::LABEL_RESOURCE_NAME).is_none() {
        return UnitLabels::new();
    }
    UNIT_LABELS
        .iter()
        .filter_map(|key| Some((key.to_string(), value(key)?)))
        .collect()
}

/// A unit's key as the index keeps it: each of `UNIT_LABELS` in turn, its value after a 1 or
/// absent as a 0, each ended by a 0. One small string per unit instead of a map of four: a
/// pair may have a unit per matching resource (100,000 of them, issue 20).
fn unit_key(unit: &UnitLabels) -> Box<str> {
    let mut key = String::new();
    for label in UNIT_LABELS {
        if let Some(value) = unit.get(label) {
            key.push('\u{1}');
            key.push_str(value);
        }
        key.push('\u{0}');
    }
    debug_assert!(
        unit.keys().all(|k| UNIT_LABELS.contains(&k.as_str())),
        "a unit is keyed by its unit labels only: {unit:?}"
    );
    key.into_boxed_str()
}

/// One held object as the index keeps it: kind, namespace, name and content hash in one
/// string, each ended by a 0 (none of them holds one).
fn held(id: &ObjectId, hash: &str) -> Box<str> {
    [id.0.as_str(), &id.1, &id.2, hash]
        .join("\u{0}")
        .into_boxed_str()
}

fn held_parts(held: &str) -> (ObjectId, String) {
    let mut parts = held.split('\u{0}').map(str::to_string);
    let mut next = || parts.next().unwrap_or_default();
    ((next(), next(), next()), next())
}

fn compact(known: &Known) -> Box<[Box<str>]> {
    known.iter().map(|(id, hash)| held(id, hash)).collect()
}

fn expand<'a>(held: impl IntoIterator<Item = &'a Box<str>>) -> Known {
    held.into_iter().map(|h| held_parts(h)).collect()
}

/// The objects of one pair, by unit, kept compact (`unit_key`, `held`).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct PairIndex {
    units: HashMap<Box<str>, Box<[Box<str>]>>,
    /// Units whose objects are not known since an execution of theirs failed: each is listed
    /// alone on its next need ([`Pairs::unknown`]).
    stale: HashSet<Box<str>>,
}

impl PairIndex {
    /// From a LIST of the pair: (listed kind, object) each (content unknown: applied again once).
    #[cfg(test)]
    pub(crate) fn of<'a>(listed: impl IntoIterator<Item = (&'a str, &'a Value)>) -> PairIndex {
        let mut listing = Listing::default();
        for (kind, object) in listed {
            listing.add(kind, object);
        }
        listing.index()
    }

    /// What one unit holds, or the whole pair when `whole`.
    pub(crate) fn known(&self, unit: &UnitLabels, whole: bool) -> Known {
        if whole {
            return expand(self.units.values().flatten());
        }
        self.units
            .get(&unit_key(unit))
            .map(|held| expand(held.iter()))
            .unwrap_or_default()
    }

    /// A unit now holds exactly `known`.
    fn set(&mut self, unit: &UnitLabels, known: &Known) {
        let key = unit_key(unit);
        self.stale.remove(&key);
        if known.is_empty() {
            self.units.remove(&key);
        } else {
            self.units.insert(key, compact(known));
        }
    }
}

enum Slot {
    /// A LIST is under way; what units recorded meanwhile, in order.
    Listing {
        generation: u64,
        journal: Vec<(UnitLabels, Known)>,
    },
    Ready(PairIndex),
}

/// Every pair's index, by the pair's key. A pair without one is listed on next need, unless
/// the pairs were seeded ([`Pairs::seed`]): then a pair without one holds nothing, unless it
/// was forgotten after an error since.
#[derive(Default)]
pub(crate) struct Pairs {
    slots: HashMap<String, Slot>,
    generations: u64,
    seeded: bool,
    /// Pairs forgotten after an error since the seed: listed on next need.
    unknown: HashSet<String>,
}

impl Pairs {
    /// What a unit of an indexed pair holds (see [`PairIndex::known`]); `None` when it must be
    /// listed first: the unit alone when [`Pairs::is_stale`], else the pair (the whole pair
    /// also while any unit of it is stale).
    pub(crate) fn known(&self, pair: &str, unit: &UnitLabels, whole: bool) -> Option<Known> {
        match self.slots.get(pair)? {
            Slot::Ready(index) if whole && !index.stale.is_empty() => None,
            Slot::Ready(index) if !whole && index.stale.contains(&unit_key(unit)) => None,
            Slot::Ready(index) => Some(index.known(unit, whole)),
            Slot::Listing { .. } => None,
        }
    }

    /// A LIST of the pair starts: what units record from now on is kept for it. The returned
    /// generation installs its result.
    pub(crate) fn begin_listing(&mut self, pair: &str) -> u64 {
        self.generations += 1;
        let generation = self.generations;
        self.slots.insert(
            pair.to_string(),
            Slot::Listing {
                generation,
                journal: Vec::new(),
            },
        );
        generation
    }

    /// Installs a LIST's index, completed with what was recorded since it started, unless the
    /// pair was forgotten (or listed again) meanwhile; what `unit` holds by it either way (its
    /// own group is exact: a unit is never written by two at once).
    pub(crate) fn install(
        &mut self,
        pair: &str,
        generation: u64,
        mut index: PairIndex,
        unit: &UnitLabels,
        whole: bool,
    ) -> Known {
        let current = matches!(self.slots.get(pair),
            Some(Slot::Listing { generation: g, .. }) if *g == generation);
        if !current {
            return index.known(unit, whole);
        }
        if let Some(Slot::Listing { journal, .. }) = self.slots.remove(pair) {
            for (recorded, known) in journal {
                index.set(&recorded, &known);
            }
        }
        self.unknown.remove(pair);
        let known = index.known(unit, whole);
        self.slots.insert(pair.to_string(), Slot::Ready(index));
        known
    }

    /// Takes the indexes of every pair that holds anything, from one listing of everything
    /// sluice wrote; a pair already indexed or being listed keeps its own.
    pub(crate) fn seed(&mut self, indexes: impl IntoIterator<Item = (String, PairIndex)>) {
        for (pair, index) in indexes {
            self.slots.entry(pair).or_insert(Slot::Ready(index));
        }
        self.seeded = true;
    }

    /// Whether the pair holds nothing, known without a LIST: the pairs were seeded, it has no
    /// index, and it was not forgotten after an error since.
    pub(crate) fn is_empty_by_seed(&self, pair: &str) -> bool {
        self.seeded && !self.slots.contains_key(pair) && !self.unknown.contains(pair)
    }

    /// Whether `unit` of the pair is to be listed alone: the pair is indexed, but an execution
    /// of the unit failed since ([`Pairs::unknown`]).
    pub(crate) fn is_stale(&self, pair: &str, unit: &UnitLabels) -> bool {
        matches!(self.slots.get(pair),
            Some(Slot::Ready(index)) if index.stale.contains(&unit_key(unit)))
    }

    /// An execution of `unit` failed: the server may hold anything of it now. A resource or
    /// CloudEvent unit of an indexed pair is listed alone on its next need (its labels select
    /// its objects); the pair is listed again for its main unit, whose objects are the rest of
    /// the pair's, while a LIST of the pair is under way (it is not installed), and once more
    /// of its units are stale than [`stale_at_most`] allows.
    pub(crate) fn unknown(&mut self, pair: &str, unit: &UnitLabels) {
        if let Some(Slot::Ready(index)) = self.slots.get_mut(pair) {
            if !unit.is_empty() {
                let key = unit_key(unit);
                index.units.remove(&key);
                index.stale.insert(key);
                if index.stale.len() <= stale_at_most(index.units.len() + index.stale.len()) {
                    return;
                }
            }
        }
        self.slots.remove(pair);
        if self.seeded {
            self.unknown.insert(pair.to_string());
        }
    }

    /// What a stale unit holds by a LIST of its own objects (`listed`: the pair's objects that
    /// carry its labels); the index takes it unless the pair was forgotten or is being listed
    /// meanwhile. Exact either way: only this unit writes its objects, and it is not running.
    pub(crate) fn relearn(&mut self, pair: &str, unit: &UnitLabels, listed: Listing) -> Known {
        let known = listed.index().known(unit, false);
        if let Some(Slot::Ready(index)) = self.slots.get_mut(pair) {
            if index.stale.contains(&unit_key(unit)) {
                index.set(unit, &known);
            }
        }
        known
    }

    /// A unit of the pair now holds exactly `known` (after its applies and deletes; `removed`
    /// when the unit itself went). True when a removal left the indexed pair holding nothing:
    /// it is forgotten, and listed again on next need, so that a pair whose last unit went
    /// (its trigger or cluster gone, or a unit removed after its main unit's removal) leaves
    /// nothing behind. A unit that merely holds nothing yet (a main unit whose outputs are all
    /// per resource, recorded before the first resource unit) keeps the pair indexed. A unit
    /// that records on a pair forgotten while it ran has the pair listed on next need.
    pub(crate) fn record(
        &mut self,
        pair: &str,
        unit: UnitLabels,
        known: Known,
        removed: bool,
    ) -> bool {
        match self.slots.get_mut(pair) {
            Some(Slot::Ready(index)) => {
                index.set(&unit, &known);
                if removed && index.units.is_empty() && index.stale.is_empty() {
                    self.slots.remove(pair);
                    return true;
                }
            }
            Some(Slot::Listing { journal, .. }) => journal.push((unit, known)),
            // Forgotten while this unit ran (another unit's removal left it empty, or an
            // error): what this unit wrote is in no index, so the pair is listed on next need
            // instead of being known to hold nothing by the seed.
            None => {
                self.unknown.insert(pair.to_string());
            }
        }
        false
    }

    /// Forgets a pair (after an error: the server may hold anything; or after its removal).
    pub(crate) fn forget(&mut self, pair: &str) {
        self.slots.remove(pair);
    }
}

/// How many units of a pair of `units` may be listed alone after failing before the whole pair
/// is listed instead: 8, or one in 1,024 of a larger pair. A unit's LIST is small, but the
/// server selects it from every object of the kind, as it does the pair's, which also sends
/// them all, 500 a page. So a few failed units are listed alone, and many (the API server
/// failing for a while) by one LIST of the pair: 100 new units failing one request in three
/// for 2 s beside 300 standing made 363–384 unit LISTs and converged a second later than with
/// 28 of the pair (`docs/measurements.md`, "A failed unit's LIST").
fn stale_at_most(units: usize) -> usize {
    (units / 1024).max(8)
}

/// A pair's index built as its objects are listed, a page at a time: what it keeps of each is
/// its compact form, so a listing of every unit of a large pair never holds the objects.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    units: HashMap<Box<str>, Vec<Box<str>>>,
}

impl Listing {
    /// Takes one listed object (its metadata is enough); `kind` is the listed kind.
    pub(crate) fn add(&mut self, kind: &str, object: &Value) {
        let mut id: ObjectId = object_id(object);
        if id.0.is_empty() {
            id.0 = kind.to_string();
        }
        self.units
            .entry(unit_key(&unit_of(object)))
            .or_default()
            .push(held(&id, ""));
    }

    /// Takes what another listing (of another kind) found.
    pub(crate) fn extend(&mut self, other: Listing) {
        for (unit, held) in other.units {
            self.units.entry(unit).or_default().extend(held);
        }
    }

    pub(crate) fn index(self) -> PairIndex {
        let units = self
            .units
            .into_iter()
            .map(|(unit, mut held)| {
                held.sort();
                held.dedup();
                (unit, held.into_boxed_slice())
            })
            .collect();
        PairIndex {
            units,
            stale: HashSet::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, name: &str, unit: &UnitLabels) -> Value {
        json!({"kind": kind, "metadata": {"name": name, "namespace": "ns", "labels": unit}})
    }

    fn id(kind: &str, name: &str) -> ObjectId {
        (kind.to_string(), "ns".to_string(), name.to_string())
    }

    #[test]
    fn seeded_pairs_are_indexed_and_the_others_hold_nothing_until_an_error() {
        let web = naming::resource_labels("default", "web");
        let mut pairs = Pairs::default();
        assert!(!pairs.is_empty_by_seed("q"), "not seeded: listed on need");
        // p was listed before the seed: it keeps its own index
        let generation = pairs.begin_listing("p");
        pairs.install("p", generation, PairIndex::default(), &web, false);
        let listed = [object("ConfigMap", "a", &web)];
        let seeded = PairIndex::of(listed.iter().map(|o| ("ConfigMap", o)));
        pairs.seed([
            ("p".to_string(), PairIndex::default()),
            ("s".to_string(), seeded),
        ]);
        assert_eq!(pairs.known("p", &web, false), Some(Known::new()));
        assert_eq!(
            pairs
                .known("s", &web, false)
                .map(|k| k.into_keys().collect::<Vec<_>>()),
            Some(vec![id("ConfigMap", "a")])
        );
        assert!(!pairs.is_empty_by_seed("s"), "indexed");
        assert!(pairs.is_empty_by_seed("q"), "in no list: holds nothing");
        // an error forgets s: the server may hold anything of it, it is listed again
        for unit in 0..9 {
            pairs.unknown(
                "s",
                &naming::resource_labels("default", &format!("u{unit}")),
            );
        }
        assert_eq!(pairs.known("s", &web, false), None);
        assert!(!pairs.is_empty_by_seed("s"));
        let generation = pairs.begin_listing("s");
        pairs.install("s", generation, PairIndex::default(), &web, false);
        // its removal leaves it holding nothing, known without a LIST
        assert!(pairs.record("s", web.clone(), Known::new(), true));
        assert!(pairs.is_empty_by_seed("s"));
    }

    #[test]
    fn a_unit_that_records_after_its_pair_was_forgotten_has_the_pair_listed_again() {
        let (one, two) = (
            naming::resource_labels("default", "one"),
            naming::resource_labels("default", "two"),
        );
        let mut pairs = Pairs::default();
        let listed = [object("ClusterProfile", "p1", &one)];
        pairs.seed([(
            "s".to_string(),
            PairIndex::of(listed.iter().map(|o| ("ClusterProfile", o))),
        )]);
        // two's first state runs while the pair holds only one: two holds nothing yet
        assert_eq!(pairs.known("s", &two, false), Some(Known::new()));
        // one is removed meanwhile: by its index the pair holds nothing, and it is forgotten
        assert!(pairs.record("s", one.clone(), Known::new(), true));
        // two's objects are written: they must not be lost with the forgotten index
        let mut wrote = Known::new();
        wrote.insert(id("ClusterProfile", "p2"), "hash".to_string());
        assert!(!pairs.record("s", two.clone(), wrote, false));
        assert!(
            !pairs.is_empty_by_seed("s"),
            "what two wrote is in no index: the pair is listed, not known empty"
        );
        assert_eq!(pairs.known("s", &two, false), None);
        let generation = pairs.begin_listing("s");
        let listed = [object("ClusterProfile", "p2", &two)];
        let index = PairIndex::of(listed.iter().map(|o| ("ClusterProfile", o)));
        let known = pairs.install("s", generation, index, &two, false);
        assert_eq!(
            known.into_keys().collect::<Vec<_>>(),
            [id("ClusterProfile", "p2")]
        );
    }

    #[test]
    fn objects_are_filed_under_their_units_labels() {
        let web = naming::resource_labels("default", "web");
        let cluster_web = naming::resource_labels("", "web");
        let event = naming::cloud_event_labels("auth", "alice");
        let main = UnitLabels::new();
        let mut stray = UnitLabels::new();
        stray.insert(
            naming::LABEL_RESOURCE_NAMESPACE.to_string(),
            "x".to_string(),
        );
        let listed = [
            object("ConfigMap", "a", &web),
            object("", "b", &web),
            object("ConfigMap", "c", &cluster_web),
            object("ConfigMap", "d", &event),
            object("ConfigMap", "e", &main),
            object("ConfigMap", "f", &stray),
        ];
        let index = PairIndex::of(listed.iter().map(|o| ("Secret", o)));
        let ids = |known: Known| known.into_keys().collect::<Vec<_>>();
        assert_eq!(
            ids(index.known(&web, false)),
            [id("ConfigMap", "a"), id("Secret", "b")],
            "a listed item without kind takes the listed kind"
        );
        assert_eq!(
            ids(index.known(&cluster_web, false)),
            [id("ConfigMap", "c")]
        );
        assert_eq!(ids(index.known(&event, false)), [id("ConfigMap", "d")]);
        assert_eq!(
            ids(index.known(&main, false)),
            [id("ConfigMap", "e"), id("ConfigMap", "f")],
            "what names no resource and no CloudEvent source is the main unit's"
        );
        assert_eq!(index.known(&main, true).len(), 6);
    }

    #[test]
    fn listings_of_each_kind_extended_into_one_index_as_one_listing_of_all() {
        let web = naming::resource_labels("default", "web");
        let db = naming::resource_labels("default", "db");
        let profiles = [
            object("ClusterProfile", "p-web", &web),
            object("ClusterProfile", "p-db", &db),
        ];
        let config_maps = [
            object("ConfigMap", "c-web", &web),
            object("ConfigMap", "c-main", &UnitLabels::new()),
        ];
        let all = PairIndex::of(
            profiles
                .iter()
                .map(|o| ("ClusterProfile", o))
                .chain(config_maps.iter().map(|o| ("ConfigMap", o))),
        );
        let mut listing = Listing::default();
        for kind in [("ClusterProfile", &profiles), ("ConfigMap", &config_maps)] {
            let mut of_kind = Listing::default();
            for object in kind.1 {
                of_kind.add(kind.0, object);
            }
            listing.extend(of_kind);
        }
        let extended = listing.index();
        assert_eq!(extended, all);
        assert_eq!(
            extended.known(&web, false),
            Known::from([
                (id("ClusterProfile", "p-web"), String::new()),
                (id("ConfigMap", "c-web"), String::new()),
            ])
        );
        assert_eq!(extended.known(&UnitLabels::new(), true).len(), 4);
    }

    #[test]
    fn the_compact_forms_keep_every_unit_and_object_apart() {
        let named = naming::resource_labels("", "x");
        let mut only_namespace = UnitLabels::new();
        only_namespace.insert(
            naming::LABEL_RESOURCE_NAMESPACE.to_string(),
            "x".to_string(),
        );
        let keys = [
            unit_key(&UnitLabels::new()),
            unit_key(&named),
            unit_key(&only_namespace),
            unit_key(&naming::resource_labels("x", "x")),
            unit_key(&naming::cloud_event_labels("x", "x")),
            unit_key(&naming::resource_labels("", "")),
        ];
        let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "{keys:?}");
        let known = Known::from([
            (id("ClusterProfile", "p"), "0123abcd".to_string()),
            (
                ("ConfigMap".into(), String::new(), "c".into()),
                String::new(),
            ),
        ]);
        assert_eq!(expand(compact(&known).iter()), known);
        let mut index = PairIndex::default();
        index.set(&named, &known);
        assert_eq!(index.known(&named, false), known);
        assert_eq!(index.known(&only_namespace, false), Known::new());
        index.set(&named, &Known::new());
        assert_eq!(index, PairIndex::default(), "an empty unit is not kept");
    }

    #[test]
    fn a_list_is_completed_with_what_was_recorded_while_it_ran() {
        let web = naming::resource_labels("default", "web");
        let db = naming::resource_labels("default", "db");
        let mut pairs = Pairs::default();
        assert_eq!(pairs.known("p", &web, false), None, "not listed yet");
        pairs.record("p", web.clone(), Known::new(), false);
        let generation = pairs.begin_listing("p");
        // web's unit is written while the LIST runs, which saw db only
        let written = Known::from([(id("ConfigMap", "w"), "hash".to_string())]);
        pairs.record("p", web.clone(), written.clone(), false);
        let listed = [object("ConfigMap", "d", &db)];
        let index = PairIndex::of(listed.iter().map(|o| ("ConfigMap", o)));
        assert_eq!(pairs.install("p", generation, index, &db, false).len(), 1);
        assert_eq!(pairs.known("p", &web, false), Some(written));
        // db's unit is removed: its group goes
        assert!(!pairs.record("p", db.clone(), Known::new(), true));
        assert_eq!(pairs.known("p", &db, false), Some(Known::new()));
        assert_eq!(pairs.known("p", &web, true).map(|k| k.len()), Some(1));
        // web's unit holding nothing yet keeps the pair indexed: it is not listed again
        assert!(!pairs.record("p", web.clone(), Known::new(), false));
        assert_eq!(pairs.known("p", &web, false), Some(Known::new()));
        // web's removal leaves the pair holding nothing: it is forgotten, listed on next need
        assert!(pairs.record("p", web.clone(), Known::new(), true));
        assert_eq!(pairs.known("p", &web, false), None);
        assert!(pairs.slots.is_empty());
        // a unit recorded while the pair is not indexed leaves nothing either
        assert!(!pairs.record("p", db.clone(), Known::new(), true));
        assert!(pairs.slots.is_empty());
    }

    #[test]
    fn a_list_of_a_pair_forgotten_meanwhile_is_not_installed() {
        let web = naming::resource_labels("default", "web");
        let mut pairs = Pairs::default();
        let generation = pairs.begin_listing("p");
        pairs.forget("p");
        let listed = [object("ConfigMap", "a", &web)];
        let index = PairIndex::of(listed.iter().map(|o| ("ConfigMap", o)));
        assert_eq!(
            pairs.install("p", generation, index, &web, false).len(),
            1,
            "the caller still gets its unit's objects"
        );
        assert_eq!(
            pairs.known("p", &web, false),
            None,
            "listed again next time"
        );
        let stale = pairs.begin_listing("p");
        let newer = pairs.begin_listing("p");
        pairs.install("p", stale, PairIndex::default(), &web, false);
        assert_eq!(
            pairs.known("p", &web, false),
            None,
            "a newer LIST is running"
        );
        pairs.install("p", newer, PairIndex::default(), &web, false);
        assert_eq!(pairs.known("p", &web, false), Some(Known::new()));
    }

    #[test]
    fn a_failed_unit_is_listed_alone_and_a_failed_main_unit_lists_the_pair() {
        let web = naming::resource_labels("default", "web");
        let db = naming::resource_labels("default", "db");
        let main = UnitLabels::new();
        let listed = [
            object("ConfigMap", "c-web", &web),
            object("ConfigMap", "c-db", &db),
            object("ClusterProfile", "p-main", &main),
        ];
        let mut pairs = Pairs::default();
        let generation = pairs.begin_listing("p");
        pairs.install(
            "p",
            generation,
            PairIndex::of(listed.iter().map(|o| ("ConfigMap", o))),
            &web,
            false,
        );

        pairs.unknown("p", &web);
        assert!(pairs.is_stale("p", &web));
        assert_eq!(pairs.known("p", &web, false), None, "listed alone");
        assert!(!pairs.is_stale("p", &db));
        assert_eq!(
            pairs.known("p", &db, false).map(|k| k.len()),
            Some(1),
            "the other units stay known"
        );
        assert_eq!(
            pairs.known("p", &main, true),
            None,
            "the whole pair is not known"
        );

        // Its own LIST (by its labels, which also select another unit's object here).
        let mut own = Listing::default();
        own.add("ConfigMap", &object("ConfigMap", "c-web", &web));
        own.add("ConfigMap", &object("ConfigMap", "c-web-2", &web));
        own.add("ConfigMap", &object("ConfigMap", "c-db", &db));
        let known = pairs.relearn("p", &web, own);
        assert_eq!(
            known,
            Known::from([
                (id("ConfigMap", "c-web"), String::new()),
                (id("ConfigMap", "c-web-2"), String::new()),
            ])
        );
        assert!(!pairs.is_stale("p", &web));
        assert_eq!(pairs.known("p", &web, false), Some(known));
        assert_eq!(pairs.known("p", &main, true).map(|k| k.len()), Some(4));

        // A unit that failed then succeeded is exact again without a LIST.
        pairs.unknown("p", &db);
        pairs.record("p", db.clone(), Known::new(), false);
        assert!(!pairs.is_stale("p", &db));
        assert_eq!(pairs.known("p", &db, false), Some(Known::new()));

        // The main unit's objects are the rest of the pair's: the pair is listed again.
        pairs.unknown("p", &main);
        assert_eq!(pairs.known("p", &db, false), None);
        assert!(!pairs.is_stale("p", &db), "the pair, not the unit");
    }

    #[test]
    fn once_more_units_are_stale_than_a_few_the_pair_is_listed_instead() {
        assert_eq!(stale_at_most(20), 8);
        assert_eq!(stale_at_most(200_000), 195);
        let units: Vec<UnitLabels> = (0..20)
            .map(|i| naming::resource_labels("default", &format!("s{i}")))
            .collect();
        let listed: Vec<Value> = units
            .iter()
            .enumerate()
            .map(|(i, unit)| object("ConfigMap", &format!("c{i}"), unit))
            .collect();
        let mut pairs = Pairs::default();
        let generation = pairs.begin_listing("p");
        let index = PairIndex::of(listed.iter().map(|o| ("ConfigMap", o)));
        pairs.install("p", generation, index, &units[0], false);
        for unit in &units[..8] {
            pairs.unknown("p", unit);
        }
        assert!(pairs.is_stale("p", &units[7]), "eight are listed alone");
        assert!(pairs.known("p", &units[19], false).is_some());
        pairs.unknown("p", &units[8]);
        assert!(!pairs.is_stale("p", &units[0]));
        assert_eq!(
            pairs.known("p", &units[19], false),
            None,
            "the ninth lists the pair"
        );
    }
}
