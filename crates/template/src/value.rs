//! The template value model: Go's dynamic types as templates see them (int vs int64, float64,
//! string, bool, nil, []interface{}, map[string]interface{}), not a general JSON value.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::doc::Doc;

/// The entries of a map value, in Go's printing order (sorted keys).
pub type Map = BTreeMap<String, Value>;

/// A template value, tagged with the Go type it stands for.
///
/// Go distinguishes `int` (template literals, `len`, `atoi`) from `int64` (data, sprig math);
/// `%T`, `kindOf`, `has` and `setField` observe the difference, so both exist here.
#[derive(Clone, Debug, Default)]
pub enum Value {
    /// Go `nil` (an untyped nil interface).
    #[default]
    Nil,
    Bool(bool),
    /// Go `int64`: integral numbers in template data.
    Int(i64),
    /// Go `int`: number literals in the template and results of `len`, `int`, `atoi`.
    GoInt(i64),
    Float(f64),
    String(Arc<str>),
    List(Arc<Vec<Value>>),
    /// Go maps are references: sprig's `set` and Sveltos' `getResource` mutate them in place.
    Map(MapRef),
    /// A point in time (`now`, `toDate`), printed as Go's `time.Time`.
    Time(crate::sprig::dates::GoTime),
    /// A parsed semantic version (`semver`), with fields and the `Compare` method.
    Semver(Arc<crate::sprig::semver::Version>),
}

/// A shared, mutable map, as a Go `map[string]interface{}` is.
///
/// A map made from shared JSON (`Value::from_shared_json`, `event_data_shared`) starts lazy: a
/// lookup reads the JSON directly and converts only what it returns, so a template that reads
/// five fields of a large object pays for five fields. Maps and lists it hands out are cached
/// so that repeated lookups return the same (mutable) map, as in Go; iterating or mutating a
/// lazy map converts it one level.
#[derive(Clone, Debug, Default)]
pub struct MapRef(Arc<RwLock<MapState>>);

#[derive(Debug)]
enum MapState {
    Owned(Map),
    /// Entries still in `json`; `event` applies event-manager's Go types to the well-known
    /// top-level keys when they are converted ([`event_data_shared`]).
    Lazy {
        json: JsonRef,
        children: Map,
        event: bool,
    },
}

impl Default for MapState {
    fn default() -> Self {
        MapState::Owned(Map::new())
    }
}

static EMPTY: Map = Map::new();

/// Read access to a map's entries.
pub struct MapReadGuard<'a>(RwLockReadGuard<'a, MapState>);

impl std::ops::Deref for MapReadGuard<'_> {
    type Target = Map;
    fn deref(&self) -> &Map {
        match &*self.0 {
            MapState::Owned(m) => m,
            // `read` converts lazy maps before it locks; maps never become lazy again.
            MapState::Lazy { .. } => &EMPTY,
        }
    }
}

/// Write access to a map's entries.
pub struct MapWriteGuard<'a>(RwLockWriteGuard<'a, MapState>);

impl std::ops::Deref for MapWriteGuard<'_> {
    type Target = Map;
    fn deref(&self) -> &Map {
        match &*self.0 {
            MapState::Owned(m) => m,
            MapState::Lazy { .. } => &EMPTY,
        }
    }
}

impl std::ops::DerefMut for MapWriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut Map {
        match &mut *self.0 {
            MapState::Owned(m) => m,
            MapState::Lazy { children, .. } => children,
        }
    }
}

impl Drop for MapRef {
    /// The last owner of a map nested thousands of levels deep (`$d = dict "a" $d` in a loop)
    /// would drop it one stack frame per level and overflow a render thread's stack: it takes
    /// the nested maps' and lists' contents out level by level instead.
    fn drop(&mut self) {
        let Some(state) = Arc::get_mut(&mut self.0) else {
            return;
        };
        let entries = match state.get_mut().unwrap_or_else(|p| p.into_inner()) {
            MapState::Owned(map) => map,
            MapState::Lazy { children, .. } => children,
        };
        if !entries
            .values()
            .any(|v| matches!(v, Value::Map(_) | Value::List(_)))
        {
            return;
        }
        let mut pending: Vec<Value> = std::mem::take(entries).into_values().collect();
        while let Some(value) = pending.pop() {
            match value {
                Value::Map(mut map) => {
                    if let Some(state) = Arc::get_mut(&mut map.0) {
                        let entries = match state.get_mut().unwrap_or_else(|p| p.into_inner()) {
                            MapState::Owned(map) => map,
                            MapState::Lazy { children, .. } => children,
                        };
                        pending.extend(std::mem::take(entries).into_values());
                    }
                }
                Value::List(mut items) => {
                    if let Some(items) = Arc::get_mut(&mut items) {
                        pending.append(items);
                    }
                }
                _ => {}
            }
        }
    }
}

impl MapRef {
    pub fn new(map: Map) -> Self {
        MapRef(Arc::new(RwLock::new(MapState::Owned(map))))
    }

    fn lazy(json: JsonRef) -> Self {
        MapRef(Arc::new(RwLock::new(MapState::Lazy {
            json,
            children: Map::new(),
            event: false,
        })))
    }

    /// The untouched JSON behind a lazy map: no entry was handed out (so none was changed)
    /// and the map was never converted. Renders that cannot mutate read it in place.
    pub(crate) fn pristine_json(&self) -> Option<(JsonRef, bool)> {
        match &*self.read_state() {
            MapState::Lazy {
                json,
                children,
                event,
            } if children.is_empty() => Some((json.clone(), *event)),
            _ => None,
        }
    }

    fn read_state(&self) -> RwLockReadGuard<'_, MapState> {
        // A poisoned lock still holds consistent data: no writer panics half-way.
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, MapState> {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Converts a lazy map one level (its children stay lazy).
    fn materialize(&self) {
        if let MapState::Owned(_) = &*self.read_state() {
            return;
        }
        let mut state = self.write_state();
        if let MapState::Lazy {
            json,
            children,
            event,
        } = &mut *state
        {
            if *event {
                // Top-level event data: nothing has been handed out yet (`get` converts first).
                *state = MapState::Owned(event_map(json));
                return;
            }
            let mut map = std::mem::take(children);
            if let Doc::Object(entries) = json.get() {
                for (k, v) in entries {
                    if !map.contains_key(k) {
                        map.insert(k.to_string(), lazy_value(&json.child(v)));
                    }
                }
            }
            *state = MapState::Owned(map);
        }
    }

    /// Reads the entries.
    pub fn read(&self) -> MapReadGuard<'_> {
        self.materialize();
        MapReadGuard(self.read_state())
    }

    pub fn write(&self) -> MapWriteGuard<'_> {
        self.materialize();
        MapWriteGuard(self.write_state())
    }

    pub fn get(&self, key: &str) -> Option<Value> {
        {
            let state = self.read_state();
            match &*state {
                MapState::Owned(m) => return m.get(key).cloned(),
                MapState::Lazy { event: true, .. } => {}
                MapState::Lazy { json, children, .. } => {
                    if let Some(v) = children.get(key) {
                        return Some(v.clone());
                    }
                    let child = json.get().get(key)?;
                    if !(child.is_object() || child.is_array()) {
                        return Some(lazy_value(&json.child(child)));
                    }
                }
            }
        }
        let event = matches!(&*self.read_state(), MapState::Lazy { event: true, .. });
        if event {
            return self.read().get(key).cloned();
        }
        // A map or list: convert it once and keep it, so later lookups share it.
        let mut state = self.write_state();
        match &mut *state {
            MapState::Owned(m) => m.get(key).cloned(),
            MapState::Lazy { json, children, .. } => {
                if let Some(v) = children.get(key) {
                    return Some(v.clone());
                }
                let child = json.get().get(key)?;
                let value = lazy_value(&json.child(child));
                children.insert(key.to_string(), value.clone());
                Some(value)
            }
        }
    }

    pub fn len(&self) -> usize {
        match &*self.read_state() {
            MapState::Owned(m) => m.len(),
            MapState::Lazy { json, .. } => json.get().as_object().map_or(0, |o| o.len()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ptr_eq(&self, other: &MapRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether `value` holds this map: inserting it would make the map contain itself, which
    /// printing, encoding or copying it would follow until the stack overflows. Each map and
    /// list is visited once, to `MAX_DEPTH` levels: a value nested deeper could be neither
    /// printed nor copied, and is refused instead of walked (a loop nesting maps through `set`
    /// would otherwise walk its whole chain on every call). Maps still lazy are not converted
    /// (their JSON part holds no template-made map).
    pub fn is_within(&self, value: &Value) -> Result<bool, String> {
        let mut seen = std::collections::HashSet::new();
        let mut pending = vec![(value.clone(), 0u32)];
        while let Some((v, depth)) = pending.pop() {
            let (is_new, children): (bool, Vec<Value>) = match &v {
                Value::Map(m) if m.ptr_eq(self) => return Ok(true),
                Value::List(items) => {
                    let is_new = seen.insert(Arc::as_ptr(items) as *const () as usize);
                    (
                        is_new,
                        if is_new {
                            nested(items.iter())
                        } else {
                            Vec::new()
                        },
                    )
                }
                Value::Map(m) => {
                    let is_new = seen.insert(Arc::as_ptr(&m.0) as *const () as usize);
                    let state = m.read_state();
                    let entries = match &*state {
                        MapState::Owned(entries) => entries,
                        MapState::Lazy { children, .. } => children,
                    };
                    (
                        is_new,
                        if is_new {
                            nested(entries.values())
                        } else {
                            Vec::new()
                        },
                    )
                }
                _ => (false, Vec::new()),
            };
            if !is_new || children.is_empty() {
                continue;
            }
            if depth >= MAX_DEPTH {
                return Err(format!(
                    "value nested more than {MAX_DEPTH} levels deep exceeds the template depth limit"
                ));
            }
            pending.extend(children.into_iter().map(|c| (c, depth + 1)));
        }
        Ok(false)
    }
}

/// The lists and maps among `values`.
fn nested<'v>(values: impl Iterator<Item = &'v Value>) -> Vec<Value> {
    values
        .filter(|v| matches!(v, Value::Map(_) | Value::List(_)))
        .cloned()
        .collect()
}

/// A node of a shared JSON document that is never modified.
#[derive(Clone)]
pub(crate) struct JsonRef {
    root: Arc<Doc>,
    node: std::ptr::NonNull<Doc>,
}

// SAFETY: `node` points into `*root`, which `root` keeps alive and which is never mutated (the
// Arc is only ever read through shared references). `Doc` is Send and Sync, so
// sharing a reference into it across threads is sound.
unsafe impl Send for JsonRef {}
unsafe impl Sync for JsonRef {}

impl std::fmt::Debug for JsonRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonRef")
    }
}

impl JsonRef {
    fn new(root: Arc<Doc>) -> JsonRef {
        let node = std::ptr::NonNull::from(&*root);
        JsonRef { root, node }
    }

    pub(crate) fn get(&self) -> &Doc {
        // SAFETY: see the Send/Sync impls: the pointee lives as long as `self.root`.
        unsafe { self.node.as_ref() }
    }

    /// A reference to `node`, which must have been reached from `self.get()`.
    pub(crate) fn child(&self, node: &Doc) -> JsonRef {
        JsonRef {
            root: Arc::clone(&self.root),
            node: std::ptr::NonNull::from(node),
        }
    }
}

/// One level of conversion: scalars become values, objects lazy maps, arrays lists of those.
pub(crate) fn lazy_value(j: &JsonRef) -> Value {
    match j.get() {
        Doc::Object(_) => Value::Map(MapRef::lazy(j.clone())),
        Doc::Array(items) => Value::list(
            items
                .iter()
                .map(|item| lazy_value(&j.child(item)))
                .collect(),
        ),
        scalar => Value::from(scalar),
    }
}

impl Value {
    pub fn str(s: &str) -> Value {
        Value::String(Arc::from(s))
    }

    pub fn string(s: String) -> Value {
        Value::String(Arc::from(s))
    }

    pub fn list(items: Vec<Value>) -> Value {
        Value::List(Arc::new(items))
    }

    pub fn map(map: Map) -> Value {
        Value::Map(MapRef::new(map))
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    /// Go's `%T` / sprig `typeOf` name of the dynamic type.
    pub fn go_type(&self) -> &'static str {
        match self {
            Value::Nil => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int64",
            Value::GoInt(_) => "int",
            Value::Float(_) => "float64",
            Value::String(_) => "string",
            Value::List(_) => "[]interface {}",
            Value::Map(_) => "map[string]interface {}",
            Value::Time(_) => "time.Time",
            Value::Semver(_) => "*semver.Version",
        }
    }

    /// Go's `reflect.Kind` name (sprig `kindOf`).
    pub fn go_kind(&self) -> &'static str {
        match self {
            Value::Nil => "invalid",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int64",
            Value::GoInt(_) => "int",
            Value::Float(_) => "float64",
            Value::String(_) => "string",
            Value::List(_) => "slice",
            Value::Map(_) => "map",
            Value::Time(_) => "struct",
            Value::Semver(_) => "ptr",
        }
    }

    /// Go template truth: false, 0, nil, and empty strings, lists and maps are false.
    pub fn truth(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) | Value::GoInt(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::String(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.is_empty(),
            Value::Time(_) | Value::Semver(_) => true,
        }
    }

    /// A deep copy: maps become new maps (sprig `deepCopy`).
    pub fn deep_copy(&self) -> Value {
        match self {
            Value::List(l) => Value::list(l.iter().map(Value::deep_copy).collect()),
            Value::Map(m) => Value::map(
                m.read()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.deep_copy()))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Converts to JSON; `None` for values JSON cannot hold (NaN, infinities).
    pub fn to_json(&self) -> Option<serde_json::Value> {
        Some(match self {
            Value::Nil => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) | Value::GoInt(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Value::Number(serde_json::Number::from_f64(*f)?),
            Value::String(s) => serde_json::Value::String(s.to_string()),
            Value::List(l) => {
                serde_json::Value::Array(l.iter().map(Value::to_json).collect::<Option<_>>()?)
            }
            Value::Map(m) => serde_json::Value::Object(
                m.read()
                    .iter()
                    .map(|(k, v)| Some((k.clone(), v.to_json()?)))
                    .collect::<Option<_>>()?,
            ),
            Value::Time(t) => serde_json::Value::String(t.rfc3339()),
            Value::Semver(v) => serde_json::Value::String(v.to_string()),
        })
    }
}

/// sluice's number rule: an integral JSON number is a Go `int64` (as in Kubernetes'
/// unstructured objects); any other number, including integers beyond int64, is `float64`.
impl From<&serde_json::Value> for Value {
    fn from(json: &serde_json::Value) -> Self {
        match json {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => number(n),
            serde_json::Value::String(s) => Value::str(s),
            serde_json::Value::Array(items) => Value::list(items.iter().map(Value::from).collect()),
            serde_json::Value::Object(entries) => Value::map(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from(v)))
                    .collect(),
            ),
        }
    }
}

/// sluice's number rule for one JSON number.
fn number(n: &serde_json::Number) -> Value {
    match n.as_i64() {
        Some(i) => Value::Int(i),
        None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

impl From<serde_json::Value> for Value {
    fn from(json: serde_json::Value) -> Self {
        Value::from_shared_json(Arc::new(Doc::from(&json)))
    }
}

/// The same number rule over the event's document.
impl From<&Doc> for Value {
    fn from(json: &Doc) -> Self {
        match json {
            Doc::Null => Value::Nil,
            Doc::Bool(b) => Value::Bool(*b),
            Doc::Number(n) => number(n),
            Doc::String(s) => Value::str(s),
            Doc::Array(items) => Value::list(items.iter().map(Value::from).collect()),
            Doc::Object(entries) => Value::map(
                entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), Value::from(v)))
                    .collect(),
            ),
        }
    }
}

impl Value {
    /// A value over a shared JSON document that converts only what templates read (see
    /// [`MapRef`]); same number rule as `From<&Doc>`.
    pub fn from_shared_json(json: Arc<Doc>) -> Value {
        lazy_value(&JsonRef::new(json))
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::str(s)
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::string(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

/// Builds the top-level data of an event-manager template from JSON with event-manager's Go
/// types for the well-known keys (spec §6.8): a `null` `.Resource`, `.CloudEvent` or `.Cluster`
/// is a nil `map[string]interface{}` (prints `map[]`, any key lookup misses), `null` entries of
/// `.Resources`/`.CloudEvents` likewise, and `.MatchingResource(s)` are `ObjectReference`s whose
/// absent fields are empty strings.
pub fn event_data(json: &serde_json::Value) -> Value {
    doc_event_data(&Doc::from(json))
}

/// [`event_data`] of the event's document.
pub fn doc_event_data(json: &Doc) -> Value {
    build_event_data(json, &|v| Value::from(v))
}

/// [`event_data`] over a shared JSON document, converting only what templates read: the cheap
/// way to give one event's data to many templates. Wrapping costs one allocation; templates
/// that cannot modify maps read the JSON in place.
pub fn event_data_shared(json: Arc<Doc>) -> Value {
    let root = JsonRef::new(json);
    if !root.get().is_object() {
        return lazy_value(&root);
    }
    Value::Map(MapRef(Arc::new(RwLock::new(MapState::Lazy {
        json: root,
        children: Map::new(),
        event: true,
    }))))
}

/// The top-level map of event data over shared JSON (an object), children lazy.
fn event_map(root: &JsonRef) -> Map {
    build_event_map(root.get(), &|v| lazy_value(&root.child(v)))
}

/// The top-level event value of `node` (reached from `root`), as [`event_data_shared`] sees it.
pub(crate) fn event_value(root: &JsonRef, node: &Doc) -> Value {
    match node {
        Doc::Object(_) => Value::map(event_map(&root.child(node))),
        other => lazy_value(&root.child(other)),
    }
}

/// `.Resources`/`.CloudEvents` entries: a `null` entry is an empty map.
pub(crate) fn event_entry(convert: &dyn Fn(&Doc) -> Value, item: &Doc) -> Value {
    if item.is_null() {
        Value::map(Map::new())
    } else {
        convert(item)
    }
}

fn build_event_data(json: &Doc, convert: &dyn Fn(&Doc) -> Value) -> Value {
    if !json.is_object() {
        return convert(json);
    }
    Value::map(build_event_map(json, convert))
}

fn build_event_map(json: &Doc, convert: &dyn Fn(&Doc) -> Value) -> Map {
    let mut map = Map::new();
    let Doc::Object(entries) = json else {
        return map;
    };
    for (key, value) in entries {
        let converted = match (key, value) {
            ("Resource" | "CloudEvent" | "Cluster", Doc::Null) => Value::map(Map::new()),
            ("Resources" | "CloudEvents", Doc::Array(items)) => Value::list(
                items
                    .iter()
                    .map(|item| event_entry(convert, item))
                    .collect(),
            ),
            ("MatchingResource", item) => object_reference(item),
            ("MatchingResources", Doc::Array(items)) => {
                Value::list(items.iter().map(object_reference).collect())
            }
            _ => convert(value),
        };
        map.insert(key.to_string(), converted);
    }
    map
}

const OBJECT_REFERENCE_FIELDS: [&str; 7] = [
    "APIVersion",
    "FieldPath",
    "Kind",
    "Name",
    "Namespace",
    "ResourceVersion",
    "UID",
];

pub(crate) fn object_reference(json: &Doc) -> Value {
    let mut map = Map::new();
    for field in OBJECT_REFERENCE_FIELDS {
        let value = json.get(field).and_then(|v| v.as_str()).unwrap_or_default();
        map.insert(field.to_string(), Value::str(value));
    }
    Value::map(map)
}

/// Deepest nesting of lists and maps a template may print, encode or copy: printing recurses
/// once per level on the render thread's stack.
pub const MAX_DEPTH: u32 = 1000;

/// Checks that printing, encoding or copying `value` stays within `cap` bytes and `MAX_DEPTH`
/// levels, before it is expanded. A map or list held in several places (`dict "a" $d "b" $d`,
/// shared, not copied) prints once per occurrence, so its size counts once per occurrence;
/// each distinct one is measured once, so the check costs at most what it checks for.
///
/// The size is a lower bound of every printed form (Go's `%v`, JSON, YAML): every list, map
/// and scalar prints at least one byte, a string at least its length, a key at least its own.
pub(crate) fn check_expanded(value: &Value, cap: u64) -> Result<(), String> {
    let mut measure = Measure {
        cap,
        memo: std::collections::HashMap::new(),
    };
    let (size, height) = measure.value(value, 0);
    if height > MAX_DEPTH {
        return Err(format!(
            "value nested more than {MAX_DEPTH} levels deep exceeds the template depth limit"
        ));
    }
    if size > cap {
        return Err(format!(
            "printed value of more than {cap} bytes exceeds the template budget of {cap}"
        ));
    }
    Ok(())
}

/// The walk of [`check_expanded`]: sizes saturate just past `cap`, heights past `MAX_DEPTH`,
/// where the walk stops.
struct Measure {
    cap: u64,
    /// (size, height) of each list and map measured, by address.
    memo: std::collections::HashMap<usize, (u64, u32)>,
}

impl Measure {
    fn value(&mut self, value: &Value, depth: u32) -> (u64, u32) {
        match value {
            Value::String(s) => (s.len().max(1) as u64, 0),
            Value::List(items) => {
                let key = Arc::as_ptr(items) as *const () as usize;
                self.shared(key, |m| {
                    m.children(items.iter().map(|v| (0, Node::V(v))), depth)
                })
            }
            Value::Map(map) => {
                let key = Arc::as_ptr(&map.0) as *const () as usize;
                self.shared(key, |m| match &*map.read_state() {
                    MapState::Owned(entries) => {
                        m.children(entries.iter().map(|(k, v)| (k.len(), Node::V(v))), depth)
                    }
                    MapState::Lazy { json, children, .. } => {
                        let own = json.get().as_object().into_iter().flat_map(|o| {
                            o.iter()
                                .filter(|(k, _)| !children.contains_key(*k))
                                .map(|(k, v)| (k.len(), Node::J(v)))
                        });
                        let changed = children.iter().map(|(k, v)| (k.len(), Node::V(v)));
                        m.children(own.chain(changed), depth)
                    }
                })
            }
            _ => (1, 0),
        }
    }

    fn doc(&mut self, doc: &Doc, depth: u32) -> (u64, u32) {
        match doc {
            Doc::String(s) => (s.len().max(1) as u64, 0),
            Doc::Array(items) => self.children(items.iter().map(|v| (0, Node::J(v))), depth),
            Doc::Object(o) => self.children(o.iter().map(|(k, v)| (k.len(), Node::J(v))), depth),
            _ => (1, 0),
        }
    }

    /// A list or map measured once per address.
    fn shared(&mut self, key: usize, measure: impl FnOnce(&mut Self) -> (u64, u32)) -> (u64, u32) {
        if let Some(known) = self.memo.get(&key) {
            return *known;
        }
        let known = measure(self);
        self.memo.insert(key, known);
        known
    }

    /// One list or map of `children` (key length, value) at `depth`.
    fn children<'v>(
        &mut self,
        children: impl Iterator<Item = (usize, Node<'v>)>,
        depth: u32,
    ) -> (u64, u32) {
        let (mut size, mut height) = (1u64, 1u32);
        if depth >= MAX_DEPTH {
            return (size, MAX_DEPTH + 1);
        }
        for (key, child) in children {
            let (s, h) = match child {
                Node::V(v) => self.value(v, depth + 1),
                Node::J(j) => self.doc(j, depth + 1),
            };
            size = size.saturating_add(key as u64).saturating_add(s);
            height = height.max(h.saturating_add(1));
            if size > self.cap || height > MAX_DEPTH {
                break;
            }
        }
        (size, height)
    }
}

enum Node<'v> {
    V(&'v Value),
    J(&'v Doc),
}
