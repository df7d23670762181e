//! The template value model: Go's dynamic types as templates see them (int vs int64, float64,
//! string, bool, nil, []interface{}, map[string]interface{}), not a general JSON value.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

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
#[derive(Clone, Debug, Default)]
pub struct MapRef(Arc<RwLock<Map>>);

impl MapRef {
    pub fn new(map: Map) -> Self {
        MapRef(Arc::new(RwLock::new(map)))
    }

    /// Reads the entries; a poisoned lock still holds consistent data (no writer panics mid-way).
    pub fn read(&self) -> RwLockReadGuard<'_, Map> {
        self.0.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Map> {
        self.0.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<Value> {
        self.read().get(key).cloned()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    pub fn ptr_eq(&self, other: &MapRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
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
            Value::Map(m) => Value::map(m.read().iter().map(|(k, v)| (k.clone(), v.deep_copy())).collect()),
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
            Value::List(l) => serde_json::Value::Array(l.iter().map(Value::to_json).collect::<Option<_>>()?),
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
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::str(s),
            serde_json::Value::Array(items) => Value::list(items.iter().map(Value::from).collect()),
            serde_json::Value::Object(entries) => {
                Value::map(entries.iter().map(|(k, v)| (k.clone(), Value::from(v))).collect())
            }
        }
    }
}

impl From<serde_json::Value> for Value {
    fn from(json: serde_json::Value) -> Self {
        Value::from(&json)
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
    let serde_json::Value::Object(entries) = json else {
        return Value::from(json);
    };
    let mut map = Map::new();
    for (key, value) in entries {
        let converted = match (key.as_str(), value) {
            ("Resource" | "CloudEvent" | "Cluster", serde_json::Value::Null) => Value::map(Map::new()),
            ("Resources" | "CloudEvents", serde_json::Value::Array(items)) => Value::list(
                items
                    .iter()
                    .map(|item| if item.is_null() { Value::map(Map::new()) } else { Value::from(item) })
                    .collect(),
            ),
            ("MatchingResource", item) => object_reference(item),
            ("MatchingResources", serde_json::Value::Array(items)) => {
                Value::list(items.iter().map(object_reference).collect())
            }
            _ => Value::from(value),
        };
        map.insert(key.clone(), converted);
    }
    Value::map(map)
}

const OBJECT_REFERENCE_FIELDS: [&str; 7] =
    ["APIVersion", "FieldPath", "Kind", "Name", "Namespace", "ResourceVersion", "UID"];

fn object_reference(json: &serde_json::Value) -> Value {
    let mut map = Map::new();
    for field in OBJECT_REFERENCE_FIELDS {
        let value = json.get(field).and_then(|v| v.as_str()).unwrap_or_default();
        map.insert(field.to_string(), Value::str(value));
    }
    Value::map(map)
}
