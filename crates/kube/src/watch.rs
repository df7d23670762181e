//! Level-based watching: turns a Kubernetes watch (with its re-lists after dropped streams,
//! 410 Gone and restarts) into changes of the current state. A re-list yields only real
//! differences, so a transient empty or partial view never reads as deletions.

use std::collections::HashMap;

use futures::{Stream, StreamExt};
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde_json::Value;

use crate::apply::Kind;

/// (namespace, name) of an object.
pub type ObjectKey = (String, String);

/// A change of the current state of one object.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The object exists with this content (new or changed).
    Upsert(Value),
    /// The object is gone; the last known key and resourceVersion are given.
    Delete {
        namespace: String,
        name: String,
        resource_version: String,
    },
}

impl Change {
    /// (namespace, name, resourceVersion, object); the object is `None` for a deletion.
    pub fn into_parts(self) -> (String, String, String, Option<Value>) {
        match self {
            Change::Upsert(object) => {
                let ((namespace, name), rv) = key_of(&object);
                (namespace, name, rv, Some(object))
            }
            Change::Delete {
                namespace,
                name,
                resource_version,
            } => (namespace, name, resource_version, None),
        }
    }
}

/// The pure part of a level watch: what is known, and what a watch event changes.
#[derive(Debug, Default)]
pub struct LevelState {
    known: HashMap<ObjectKey, String>,
    relist: Option<HashMap<ObjectKey, Value>>,
}

impl LevelState {
    /// Starts from what an earlier run published, so deletions that happened while nobody
    /// watched are found at the first complete list.
    pub fn with_known(known: HashMap<ObjectKey, String>) -> LevelState {
        LevelState {
            known,
            relist: None,
        }
    }

    pub fn known(&self) -> &HashMap<ObjectKey, String> {
        &self.known
    }

    /// Feeds one watch event and returns the resulting state changes.
    pub fn on_event(&mut self, event: Event<Value>) -> Vec<Change> {
        match event {
            Event::Apply(object) => self.upsert(object).into_iter().collect(),
            Event::Delete(object) => {
                let (key, rv) = key_of(&object);
                self.known.remove(&key);
                vec![Change::Delete {
                    namespace: key.0,
                    name: key.1,
                    resource_version: rv,
                }]
            }
            Event::Init => {
                self.relist = Some(HashMap::new());
                Vec::new()
            }
            Event::InitApply(object) => {
                let (key, _) = key_of(&object);
                self.relist
                    .get_or_insert_with(HashMap::new)
                    .insert(key, object);
                Vec::new()
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let mut changes: Vec<Change> = self
                    .known
                    .iter()
                    .filter(|(key, _)| !listed.contains_key(*key))
                    .map(|((namespace, name), rv)| Change::Delete {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        resource_version: rv.clone(),
                    })
                    .collect();
                for change in &changes {
                    if let Change::Delete {
                        namespace, name, ..
                    } = change
                    {
                        self.known.remove(&(namespace.clone(), name.clone()));
                    }
                }
                let mut listed: Vec<_> = listed.into_values().collect();
                listed.sort_by(|a, b| key_of(a).0.cmp(&key_of(b).0));
                changes.extend(listed.into_iter().filter_map(|o| self.upsert(o)));
                changes
            }
        }
    }

    fn upsert(&mut self, object: Value) -> Option<Change> {
        let (key, rv) = key_of(&object);
        if self.known.get(&key) == Some(&rv) {
            return None;
        }
        self.known.insert(key, rv);
        Some(Change::Upsert(object))
    }
}

/// (namespace, name) and resourceVersion of an object.
pub fn key_of(object: &Value) -> (ObjectKey, String) {
    let meta = object.get("metadata");
    let field = |f: &str| {
        meta.and_then(|m| m.get(f))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (
        (field("namespace"), field("name")),
        field("resourceVersion"),
    )
}

/// Watches every object of `kind` in the cluster and yields batches of state changes.
/// Errors from the API server are yielded and the watch goes on with backoff.
pub fn watch_kind(
    client: Client,
    kind: Kind,
    known: HashMap<ObjectKey, String>,
) -> impl Stream<Item = Result<Vec<Change>, watcher::Error>> + Send {
    let api: Api<DynamicObject> = Api::all_with(client, &kind.resource);
    changes_of(level_watch_listing(api, watcher::Config::default(), known))
}

/// One batch of [`watch_kind_listing`]: the state changes, and the complete list of the kind
/// that ends with it, if one does.
#[derive(Debug)]
pub struct Listing {
    pub changes: Vec<Change>,
    pub list: Option<ListDone>,
}

/// A complete list of a kind: when it began (its first page asked for) and how many objects
/// it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListDone {
    pub began: std::time::SystemTime,
    pub objects: usize,
}

/// [`watch_kind`] saying which batch completes a list (the first one and every re-list), so a
/// caller knows when it has seen every object that exists.
pub fn watch_kind_listing(
    client: Client,
    kind: Kind,
    known: HashMap<ObjectKey, String>,
) -> impl Stream<Item = Result<Listing, watcher::Error>> + Send {
    watch_kind_listing_selected(client, kind, known, None)
}

/// [`watch_kind_listing`] of the objects `labels` selects (a label selector the API server
/// applies, such as `!key` for the objects without a label): an object that stops matching
/// reaches the watch as a deletion, one that starts to as an addition.
pub fn watch_kind_listing_selected(
    client: Client,
    kind: Kind,
    known: HashMap<ObjectKey, String>,
    labels: Option<&str>,
) -> impl Stream<Item = Result<Listing, watcher::Error>> + Send {
    let api: Api<DynamicObject> = Api::all_with(client, &kind.resource);
    let config = match labels {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    level_watch_listing(api, config, known)
}

/// [`watch_kind`] restricted to objects carrying all of `labels` (a label selector on the
/// server), starting from nothing known. Each change's object is its metadata only
/// (`PartialObjectMetadata`): what the labels say of it, without its contents.
pub fn watch_labelled(
    client: Client,
    kind: Kind,
    labels: &std::collections::BTreeMap<String, String>,
) -> impl Stream<Item = Result<Vec<Change>, watcher::Error>> + Send {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &kind.resource);
    let config = watcher::Config::default().labels(&crate::apply::selector_of(labels));
    changes_of(level_watch_listing(api, config, HashMap::new()))
}

/// [`watch_kind`] of the one object `namespace`/`name` (a namespaced list and watch with a
/// `metadata.name` field selector), so a caller needs no cluster-wide access to the kind.
pub fn watch_object(
    client: Client,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> impl Stream<Item = Result<Vec<Change>, watcher::Error>> + Send {
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &kind.resource);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    changes_of(level_watch_listing(api, config, HashMap::new()))
}

/// The changes of a [`level_watch_listing`], without saying which batch completes a list.
fn changes_of(
    listing: impl Stream<Item = Result<Listing, watcher::Error>> + Send,
) -> impl Stream<Item = Result<Vec<Change>, watcher::Error>> + Send {
    listing.map(|listing| listing.map(|l| l.changes))
}

/// The kube-rs watcher with backoff, turned into level changes against `known`, saying which
/// batch completes a list: of whole objects (`DynamicObject`) or of their metadata
/// (`PartialObjectMeta`), each turned into JSON.
fn level_watch_listing<K>(
    api: Api<K>,
    config: watcher::Config,
    known: HashMap<ObjectKey, String>,
) -> impl Stream<Item = Result<Listing, watcher::Error>> + Send
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
{
    let mut state = LevelState::with_known(known);
    let mut list_began = None;
    let mut list_objects = 0;
    watcher::watcher(api, config.any_semantic())
        .default_backoff()
        .map(move |event| {
            let event = to_json_event(event?);
            match &event {
                Event::Init => {
                    list_began = Some(std::time::SystemTime::now());
                    list_objects = 0;
                }
                Event::InitApply(_) => list_objects += 1,
                _ => {}
            }
            let list = matches!(event, Event::InitDone).then(|| ListDone {
                began: list_began.take().unwrap_or_else(std::time::SystemTime::now),
                objects: list_objects,
            });
            Ok(Listing {
                changes: state.on_event(event),
                list,
            })
        })
}

/// An object an owned-objects watch saw go or edited: its key and what the caller kept of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Gone {
    pub namespace: String,
    pub name: String,
    /// What `keep` returned for the object when it was last seen.
    pub kept: String,
}

/// What a writer tells its [`watch_owned`] it wrote, or expects to exist, with what `keep`
/// would take from each: their deletions are found also when the watch never saw them, as
/// when they came and went while it had fallen behind and the server made it re-list (a 410
/// Gone). Shared between the writer and the watch; the watch takes the notes as its events
/// come.
#[derive(Clone, Debug, Default)]
pub struct Written(std::sync::Arc<std::sync::Mutex<HashMap<ObjectKey, String>>>);

impl Written {
    /// The object `key` was written (or is expected to exist), and `kept` is what `keep`
    /// takes from it.
    pub fn note(&self, key: ObjectKey, kept: String) {
        self.lock().insert(key, kept);
    }

    /// The notes made since the last take.
    fn take(&self) -> HashMap<ObjectKey, String> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What an object's `managedFields` say of one field manager's hold on its main resource (not
/// its status): how many fields (nodes of its `fieldsV1`) the manager owns, whether any other
/// manager owns some, and whether another owns some of its contents (beyond `metadata`).
///
/// Someone else's change of a field the manager owns takes the field from it, whether made by
/// an update (`kubectl edit`, `patch`, `replace`, a client-side `apply`) or a forced apply:
/// between two of its own writes the manager's count can only shrink, and only with another
/// manager present. An object seen for the first time has no count to compare with: there,
/// another manager owning some of its contents is what tells an edit (its labels, a finalizer,
/// the status are someone else's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub owned: usize,
    pub others: bool,
    pub foreign: bool,
}

impl Hold {
    pub fn of(object: &Value, manager: &str) -> Hold {
        let mut hold = Hold {
            owned: 0,
            others: false,
            foreign: false,
        };
        let entries = object
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array);
        for entry in entries.into_iter().flatten() {
            if entry
                .get("subresource")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                continue;
            }
            let fields = entry.get("fieldsV1").map_or(0, nodes);
            if entry.get("manager").and_then(Value::as_str) == Some(manager) {
                hold.owned += fields;
            } else if fields > 0 {
                hold.others = true;
                hold.foreign |= entry
                    .get("fieldsV1")
                    .and_then(Value::as_object)
                    .is_some_and(|f| f.keys().any(|k| k != "f:metadata"));
            }
        }
        hold
    }
}

/// The nodes of a `fieldsV1` tree.
fn nodes(fields: &Value) -> usize {
    fields
        .as_object()
        .map_or(0, |map| map.values().map(|child| 1 + nodes(child)).sum())
}

/// What a watch of owned objects remembers of one: what `keep` took from it, and how many of
/// its fields the writer held when last seen (`None`: only told of, not seen since).
#[derive(Clone, Debug)]
struct Kept {
    kept: String,
    owned: Option<usize>,
}

/// The pure part of a watch of the objects a writer owns: per object it has seen or been told
/// of, what `keep` takes from it, so that a deletion is told with it also when a re-list
/// (after a dropped stream or a 410 Gone) is what finds it; and how many of its fields the
/// writer (`manager`) held, so that someone else's edit of one of them is told (as [`Hold`]
/// explains). Objects `keep` takes nothing from are not remembered.
#[derive(Debug)]
pub struct OwnedState {
    keep: fn(&Value) -> Option<String>,
    manager: &'static str,
    seen: HashMap<ObjectKey, Kept>,
    /// A re-list under way: every object listed, with what `keep` took from it and the hold.
    relist: Option<HashMap<ObjectKey, (Option<String>, Hold)>>,
    /// Objects told of while a re-list is under way: written after its list was taken, so
    /// its lack of them says nothing; remembered once it completes.
    told_meanwhile: HashMap<ObjectKey, String>,
}

/// One batch of [`watch_owned`]: objects gone, objects someone else edited, or a list
/// complete.
#[derive(Debug, Default, PartialEq)]
pub struct OwnedChanges {
    pub gone: Vec<Gone>,
    /// Objects some of whose fields the writer owned someone else changed or removed.
    pub edited: Vec<Gone>,
    /// When a list (the first one or a re-list) completes with this batch: how many objects
    /// the watch remembers, every one it can tell the deletion of from now on.
    pub listed: Option<usize>,
}

impl OwnedChanges {
    fn is_empty(&self) -> bool {
        self.gone.is_empty() && self.edited.is_empty() && self.listed.is_none()
    }
}

impl OwnedState {
    /// Starts from `seen`, what is expected to exist (with what `keep` would take from each),
    /// so that the first complete list tells those missing as gone: deleted while nothing
    /// watched. `manager` is the writer's field manager.
    pub fn new(
        keep: fn(&Value) -> Option<String>,
        manager: &'static str,
        seen: HashMap<ObjectKey, String>,
    ) -> OwnedState {
        OwnedState {
            keep,
            manager,
            seen: seen
                .into_iter()
                .map(|(key, kept)| (key, Kept { kept, owned: None }))
                .collect(),
            relist: None,
            told_meanwhile: HashMap::new(),
        }
    }

    /// Remembers objects a writer says it wrote (`Written`) as if the watch had seen them, so
    /// that the next list that lacks them tells them gone; those told while a re-list is under
    /// way wait until it completes.
    pub fn remember(&mut self, told: HashMap<ObjectKey, String>) {
        match self.relist {
            Some(_) => self.told_meanwhile.extend(told),
            None => self.learn(told),
        }
    }

    fn learn(&mut self, told: HashMap<ObjectKey, String>) {
        for (key, kept) in told {
            match self.seen.get_mut(&key) {
                Some(seen) => seen.kept = kept,
                None => {
                    self.seen.insert(key, Kept { kept, owned: None });
                }
            }
        }
    }

    /// How many objects it remembers.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Feeds one watch event and returns what it shows gone or edited.
    pub fn on_event(&mut self, event: Event<Value>) -> OwnedChanges {
        let mut changes = OwnedChanges::default();
        match event {
            Event::Apply(object) => {
                let (key, _) = key_of(&object);
                let hold = Hold::of(&object, self.manager);
                let kept = (self.keep)(&object);
                let edited = self
                    .seen
                    .get(&key)
                    .filter(|seen| was_edited(seen, hold))
                    .map(|seen| seen.kept.clone());
                // An edit is told with what was kept before it, which the edit may have taken.
                if let Some(was) = &edited {
                    changes.edited.push(gone(key.clone(), was.clone()));
                }
                match kept.or(edited) {
                    Some(kept) => {
                        let owned = Some(hold.owned);
                        self.seen.insert(key, Kept { kept, owned });
                    }
                    None => {
                        self.seen.remove(&key);
                    }
                }
            }
            Event::Delete(object) => {
                let (key, _) = key_of(&object);
                let kept = (self.keep)(&object)
                    .or_else(|| self.seen.get(&key).map(|seen| seen.kept.clone()));
                self.seen.remove(&key);
                changes.gone.extend(kept.map(|kept| gone(key, kept)));
            }
            Event::Init => {
                self.relist = Some(HashMap::new());
            }
            Event::InitApply(object) => {
                let (key, _) = key_of(&object);
                let listed = ((self.keep)(&object), Hold::of(&object, self.manager));
                self.relist
                    .get_or_insert_with(HashMap::new)
                    .insert(key, listed);
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let mut seen = HashMap::with_capacity(listed.len());
                for (key, (kept, hold)) in listed {
                    let before = self.seen.remove(&key);
                    let first = before.as_ref().is_none_or(|before| before.owned.is_none());
                    let edited = match &before {
                        Some(before) if was_edited(before, hold) => Some(before.kept.clone()),
                        // First seen by this list: edited while nothing watched.
                        _ if first && hold.foreign => kept
                            .clone()
                            .or_else(|| before.as_ref().map(|before| before.kept.clone())),
                        _ => None,
                    };
                    if let Some(was) = &edited {
                        changes.edited.push(gone(key.clone(), was.clone()));
                    }
                    let kept = kept.or(edited);
                    if let Some(kept) = kept {
                        let owned = Some(hold.owned);
                        seen.insert(key, Kept { kept, owned });
                    }
                }
                changes.gone = std::mem::replace(&mut self.seen, seen)
                    .into_iter()
                    .map(|(key, before)| gone(key, before.kept))
                    .collect();
                let by_key =
                    |a: &Gone, b: &Gone| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name));
                changes.gone.sort_by(by_key);
                changes.edited.sort_by(by_key);
                let told = std::mem::take(&mut self.told_meanwhile);
                self.learn(told);
                changes.listed = Some(self.seen.len());
            }
        }
        changes
    }
}

/// Whether an object the writer held `before` as last seen, and holds `now`, was edited by
/// someone else: fewer of its fields are the writer's, and someone else owns some.
fn was_edited(before: &Kept, now: Hold) -> bool {
    now.others && before.owned.is_some_and(|owned| now.owned < owned)
}

fn gone((namespace, name): ObjectKey, kept: String) -> Gone {
    Gone {
        namespace,
        name,
        kept,
    }
}

/// Watches the objects of `kind` that `labels` selects (in `namespace`, or everywhere when
/// `None`) and the writer `manager` wrote, and yields batches of those gone and those someone
/// else edited, each with what `keep` took from it when it was last seen, and each completed
/// list. What `written` is told is remembered as if seen ([`OwnedState::remember`]): the
/// objects expected at start, whose deletion before the first list completes is found by it,
/// and those the writer writes, whose deletion is found also when the watch missed them. An
/// edit is told once the watch has seen the object since the writer wrote it or it started;
/// one made before a list first shows the object is told by that list when someone else owns
/// some of its contents ([`Hold`]).
/// Errors from the API server are yielded and the watch goes on with backoff. It must be read as
/// fast as it yields: a consumer that reads it between batches of other work reads it through
/// [`drained`]. `first_list`,
/// if given, is shown the objects of the first list as they come (a consistent list of the most
/// recent state), and told when it restarts and when it is complete.
pub fn watch_owned(
    client: Client,
    kind: Kind,
    namespace: Option<&str>,
    labels: &str,
    (keep, manager): (fn(&Value) -> Option<String>, &'static str),
    written: Written,
    mut first_list: Option<FirstListObserver>,
) -> impl Stream<Item = Result<OwnedChanges, watcher::Error>> + Send {
    // Metadata only: what `keep` reads and the field managers are there, and the objects'
    // contents (a Secret's data) never travel.
    let api: Api<PartialObjectMeta<DynamicObject>> = match namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, &kind.resource),
        None => Api::all_with(client, &kind.resource),
    };
    let mut state = OwnedState::new(keep, manager, HashMap::new());
    let watched = (kind.resource.api_version, kind.resource.kind);
    watcher::watcher(api, watcher::Config::default().labels(labels))
        .default_backoff()
        .filter_map(move |event| {
            state.remember(written.take());
            let batch = event.map(|event| {
                let event = of_kind(to_json_event(event), &watched);
                if let Some(observe) = first_list.as_mut() {
                    match &event {
                        Event::Init => observe(FirstList::Restarted),
                        Event::InitApply(object) => observe(FirstList::Object(object)),
                        Event::InitDone => {
                            observe(FirstList::Done);
                            first_list = None;
                        }
                        Event::Apply(_) | Event::Delete(_) => {}
                    }
                }
                state.on_event(event)
            });
            let told = batch.as_ref().map_or(true, |batch| !batch.is_empty());
            futures::future::ready(told.then_some(batch))
        })
}

/// What [`watch_owned`] shows of its first list.
pub enum FirstList<'a> {
    /// The list starts (again, after an error): what it showed before is void.
    Restarted,
    Object(&'a Value),
    Done,
}

/// Sees the first list of a [`watch_owned`], in the watch's task.
pub type FirstListObserver = Box<dyn FnMut(FirstList<'_>) + Send>;

/// Reads `stream` in a task of its own, started at once (within a Tokio runtime), and yields
/// its items: the source is read as fast as it yields, whenever the consumer reads. A watch must
/// be: a consumer that reads it only between batches of other work (a stage's side feed) falls
/// behind under load, and the API server then closes the watch, whose client lists every
/// object again. Items wait in an unbounded queue (a watch of what sluice wrote yields only
/// what someone else deleted or edited, and its lists' completions); the task ends with the
/// source, or once the returned stream is dropped.
pub fn drained<S>(stream: S) -> impl Stream<Item = S::Item> + Send
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                () = tx.closed() => break,
                item = stream.next() => {
                    let Some(item) = item else { break };
                    if tx.send(item).is_err() {
                        break;
                    }
                }
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

/// A metadata-only watch's object names itself `PartialObjectMetadata`: it is of the watched
/// kind (`apiVersion`, `kind`), as a metadata-only list's items are named.
fn of_kind(mut event: Event<Value>, (api_version, kind): &(String, String)) -> Event<Value> {
    if let Event::Apply(object) | Event::Delete(object) | Event::InitApply(object) = &mut event {
        if let Some(object) = object.as_object_mut() {
            object.insert("kind".into(), Value::from(kind.as_str()));
            object.insert("apiVersion".into(), Value::from(api_version.as_str()));
        }
    }
    event
}

fn to_json_event<K: serde::Serialize>(event: Event<K>) -> Event<Value> {
    let json = |o: K| serde_json::to_value(o).unwrap_or(Value::Null);
    match event {
        Event::Apply(o) => Event::Apply(json(o)),
        Event::Delete(o) => Event::Delete(json(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(json(o)),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, rv: &str) -> Value {
        json!({"metadata": {"namespace": "default", "name": name, "resourceVersion": rv}})
    }

    fn names(changes: &[Change]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                Change::Upsert(o) => format!("+{}", o["metadata"]["name"].as_str().unwrap_or("")),
                Change::Delete { name, .. } => format!("-{name}"),
            })
            .collect()
    }

    #[test]
    fn relist_yields_only_differences() {
        let mut s = LevelState::default();
        for e in [
            Event::Init,
            Event::InitApply(obj("a", "1")),
            Event::InitApply(obj("b", "1")),
        ] {
            assert!(s.on_event(e).is_empty());
        }
        assert_eq!(names(&s.on_event(Event::InitDone)), ["+a", "+b"]);
        // A dropped stream: the watch re-lists; a is unchanged, b changed, c is new, nothing lost.
        s.on_event(Event::Init);
        s.on_event(Event::InitApply(obj("a", "1")));
        s.on_event(Event::InitApply(obj("b", "2")));
        s.on_event(Event::InitApply(obj("c", "3")));
        assert_eq!(names(&s.on_event(Event::InitDone)), ["+b", "+c"]);
    }

    #[test]
    fn relist_finds_deletions_missed_while_not_watching() {
        let known = HashMap::from([(("default".to_string(), "gone".to_string()), "7".to_string())]);
        let mut s = LevelState::with_known(known);
        s.on_event(Event::Init);
        s.on_event(Event::InitApply(obj("kept", "8")));
        assert_eq!(names(&s.on_event(Event::InitDone)), ["-gone", "+kept"]);
    }

    #[test]
    fn an_empty_view_mid_relist_deletes_nothing() {
        let mut s = LevelState::default();
        s.on_event(Event::Apply(obj("a", "1")));
        assert!(s.on_event(Event::Init).is_empty());
        // No InitDone yet: nothing is withdrawn while the list is incomplete.
        assert_eq!(s.known().len(), 1);
        s.on_event(Event::InitApply(obj("a", "1")));
        assert!(s.on_event(Event::InitDone).is_empty());
    }

    fn kept(object: &Value) -> Option<String> {
        object["metadata"]["annotations"]["unit"]
            .as_str()
            .map(str::to_string)
    }

    fn annotated(name: &str, unit: Option<&str>) -> Value {
        let mut object = obj(name, "1");
        if let Some(unit) = unit {
            object["metadata"]["annotations"] = json!({ "unit": unit });
        }
        object
    }

    #[test]
    fn a_deletion_is_told_with_what_was_kept_of_the_object() {
        let mut s = OwnedState::new(kept, ME, HashMap::new());
        assert!(s
            .on_event(Event::Apply(annotated("a", Some("u1"))))
            .is_empty());
        assert!(s.on_event(Event::Apply(annotated("b", None))).is_empty());
        // the deleted object is told with its own annotation
        assert_eq!(
            s.on_event(Event::Delete(annotated("a", Some("u1")))).gone,
            [gone(("default".into(), "a".into()), "u1".into())]
        );
        // an object nothing was kept of is not told
        assert!(s.on_event(Event::Delete(annotated("b", None))).is_empty());
        assert!(s.is_empty());
    }

    #[test]
    fn what_was_expected_and_is_not_listed_first_is_told_gone() {
        let expected = HashMap::from([
            (("default".to_string(), "a".to_string()), "u1".to_string()),
            (("default".to_string(), "b".to_string()), "u2".to_string()),
        ]);
        let mut s = OwnedState::new(kept, ME, expected);
        s.on_event(Event::Init);
        s.on_event(Event::InitApply(annotated("b", Some("u2"))));
        assert_eq!(
            s.on_event(Event::InitDone).gone,
            [gone(("default".into(), "a".into()), "u1".into())]
        );
    }

    #[test]
    fn a_deletion_found_by_a_relist_is_told_with_what_was_kept() {
        let mut s = OwnedState::new(kept, ME, HashMap::new());
        s.on_event(Event::Apply(annotated("a", Some("u1"))));
        s.on_event(Event::Apply(annotated("b", Some("u2"))));
        s.on_event(Event::Apply(annotated("c", Some("u3"))));
        // the stream drops; meanwhile a and c are deleted and b loses its annotation (it is
        // not gone: forgotten, as by a live event)
        assert!(s.on_event(Event::Init).is_empty());
        s.on_event(Event::InitApply(annotated("b", None)));
        s.on_event(Event::InitApply(annotated("d", Some("u4"))));
        assert_eq!(
            s.on_event(Event::InitDone).gone,
            [
                gone(("default".into(), "a".into()), "u1".into()),
                gone(("default".into(), "c".into()), "u3".into()),
            ]
        );
        assert_eq!(s.len(), 1);
        // a deletion event without the annotation is told with what was kept
        assert_eq!(
            s.on_event(Event::Delete(annotated("d", None))).gone,
            [gone(("default".into(), "d".into()), "u4".into())]
        );
    }

    #[test]
    fn what_the_writer_wrote_and_the_watch_missed_is_told_gone_by_the_next_list() {
        let key = |name: &str| ("default".to_string(), name.to_string());
        let mut s = OwnedState::new(kept, ME, HashMap::new());
        s.on_event(Event::Apply(annotated("a", Some("u1"))));
        // the watch has fallen behind: b is written and deleted without it seeing either
        s.remember(HashMap::from([(key("b"), "u2".to_string())]));
        assert!(s.on_event(Event::Init).is_empty());
        // c is written while the re-list is under way, after its list was taken
        s.remember(HashMap::from([(key("c"), "u3".to_string())]));
        s.on_event(Event::InitApply(annotated("a", Some("u1"))));
        assert_eq!(
            s.on_event(Event::InitDone).gone,
            [gone(key("b"), "u2".into())]
        );
        // c is remembered once the list is complete: its deletion is told
        assert_eq!(s.len(), 2);
        assert_eq!(
            s.on_event(Event::Delete(annotated("c", None))).gone,
            [gone(key("c"), "u3".into())]
        );
    }

    const ME: &str = "writer";

    /// An object of unit `u1` whose main resource `ME` owns `mine` of (data keys) and each
    /// `(manager, subresource)` of `others` owns one field of.
    fn held(mine: &[&str], others: &[(&str, &str)]) -> Value {
        let mut object = annotated("a", Some("u1"));
        let data: serde_json::Map<String, Value> = mine
            .iter()
            .map(|key| (format!("f:{key}"), json!({})))
            .collect();
        let mut entries = vec![json!({"manager": ME, "operation": "Apply",
            "fieldsV1": {"f:data": data, "f:metadata": {"f:annotations": {"f:unit": {}}}}})];
        for (manager, subresource) in others {
            let mut entry = json!({"manager": manager, "operation": "Update",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}});
            if !subresource.is_empty() {
                entry["subresource"] = json!(subresource);
            }
            entries.push(entry);
        }
        object["metadata"]["managedFields"] = json!(entries);
        object
    }

    fn edited(s: &mut OwnedState, object: Value) -> Vec<String> {
        s.on_event(Event::Apply(object))
            .edited
            .into_iter()
            .map(|e| format!("{}/{}", e.name, e.kept))
            .collect()
    }

    #[test]
    fn a_hold_counts_the_managers_fields_of_the_main_resource_and_sees_others() {
        let object = held(&["x", "y"], &[("ctl", "status")]);
        // f:data, f:x, f:y, f:metadata, f:annotations, f:unit
        assert_eq!(
            Hold::of(&object, ME),
            Hold {
                owned: 6,
                others: false,
                foreign: false
            }
        );
        let object = held(&["x"], &[("ctl", "")]);
        assert_eq!(
            Hold::of(&object, ME),
            Hold {
                owned: 5,
                others: true,
                foreign: false
            }
        );
        let mut object = held(&["x"], &[("ctl", "")]);
        object["metadata"]["managedFields"][1]["fieldsV1"]["f:data"] = json!({"f:y": {}});
        assert_eq!(
            Hold::of(&object, ME),
            Hold {
                owned: 5,
                others: true,
                foreign: true
            },
            "another manager owns a data key"
        );
        assert_eq!(
            Hold::of(&annotated("b", None), ME),
            Hold {
                owned: 0,
                others: false,
                foreign: false
            }
        );
    }

    #[test]
    fn someone_elses_edit_of_a_field_the_writer_owns_is_told_with_what_was_kept() {
        let mut s = OwnedState::new(kept, ME, HashMap::new());
        assert!(edited(&mut s, held(&["x", "y"], &[])).is_empty());
        // another manager adds a field of its own, or writes the status: not an edit
        assert!(edited(&mut s, held(&["x", "y"], &[("label", "")])).is_empty());
        assert!(edited(
            &mut s,
            held(&["x", "y"], &[("label", ""), ("ctl", "status")])
        )
        .is_empty());
        // `kubectl edit` changes y: the field is taken from the writer
        assert_eq!(
            edited(&mut s, held(&["x"], &[("kubectl-edit", "")])),
            ["a/u1"]
        );
        // the writer writes it again: its hold grows back, which is no edit
        assert!(edited(&mut s, held(&["x", "y"], &[("label", "")])).is_empty());
        // the writer itself drops a field: alone, no edit
        assert!(edited(&mut s, held(&["x"], &[])).is_empty());
    }

    #[test]
    fn an_edit_that_takes_the_annotation_is_told_with_what_was_kept_before() {
        let mut s = OwnedState::new(kept, ME, HashMap::new());
        assert!(edited(&mut s, held(&["x"], &[])).is_empty());
        let mut object = held(&["x"], &[("kubectl-edit", "")]);
        object["metadata"]["annotations"] = json!({});
        object["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"] = json!({});
        assert_eq!(edited(&mut s, object), ["a/u1"]);
        // still remembered: its deletion is told
        assert_eq!(
            s.on_event(Event::Delete(annotated("a", None))).gone,
            [gone(("default".into(), "a".into()), "u1".into())]
        );
    }

    #[test]
    fn an_edit_is_told_by_a_relist_but_not_of_an_object_only_told_of() {
        let key = |name: &str| ("default".to_string(), name.to_string());
        let mut s = OwnedState::new(kept, ME, HashMap::from([(key("a"), "u1".to_string())]));
        // at start the hold is unknown: what the first list shows is the reference
        s.on_event(Event::Init);
        s.on_event(Event::InitApply(held(&["x"], &[("kubectl-edit", "")])));
        let first = s.on_event(Event::InitDone);
        assert!(first.edited.is_empty() && first.gone.is_empty());
        assert_eq!(first.listed, Some(1));
        // edited while the stream was down: the re-list tells it
        s.on_event(Event::Init);
        s.on_event(Event::InitApply(held(&[], &[("kubectl-edit", "")])));
        assert_eq!(
            s.on_event(Event::InitDone).edited,
            [gone(key("a"), "u1".into())]
        );
    }

    #[test]
    fn an_edit_made_before_the_first_list_is_told_by_it_when_someone_else_owns_contents() {
        let key = |name: &str| ("default".to_string(), name.to_string());
        let mut s = OwnedState::new(kept, ME, HashMap::new());
        // a's data key y was taken by `kubectl edit` while nothing watched; b carries only
        // someone else's label
        let mut a = held(&["x"], &[("kubectl-edit", "")]);
        a["metadata"]["managedFields"][1]["fieldsV1"]["f:data"] = json!({"f:y": {}});
        let mut b = held(&["x", "y"], &[("label", "")]);
        b["metadata"]["name"] = json!("b");
        s.on_event(Event::Init);
        s.on_event(Event::InitApply(a.clone()));
        s.on_event(Event::InitApply(b.clone()));
        let first = s.on_event(Event::InitDone);
        assert_eq!(first.edited, [gone(key("a"), "u1".into())]);
        assert_eq!(first.listed, Some(2));
        // written again, a's hold is the reference from then on: no edit told again
        let mut rewritten = held(&["x", "y"], &[("kubectl-edit", "")]);
        rewritten["metadata"]["managedFields"][1]["fieldsV1"]["f:data"] = json!({"f:z": {}});
        assert!(edited(&mut s, rewritten.clone()).is_empty());
        s.on_event(Event::Init);
        s.on_event(Event::InitApply(rewritten));
        s.on_event(Event::InitApply(b));
        assert!(s.on_event(Event::InitDone).edited.is_empty());
    }

    #[test]
    fn same_resource_version_is_not_repeated() {
        let mut s = LevelState::default();
        assert_eq!(names(&s.on_event(Event::Apply(obj("a", "1")))), ["+a"]);
        assert!(s.on_event(Event::Apply(obj("a", "1"))).is_empty());
        assert_eq!(names(&s.on_event(Event::Delete(obj("a", "1")))), ["-a"]);
    }
}
