//! What a render passes around: an owned [`Value`], or a borrowed node of the event's shared
//! JSON that becomes a `Value` only when a function needs one. Borrowed nodes are used only by
//! templates that call no map-mutating function, where the identity of maps is unobservable;
//! this module does not decide that (see `Template::render_into`).

use crate::doc::Doc as Json;

use crate::value::{
    doc_event_data, event_entry, event_value, lazy_value, object_reference, JsonRef, Map, Value,
};

/// How the event-manager Go types apply to a borrowed JSON node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Ordinary unstructured data.
    Plain,
    /// The top-level event data (`.Resource`, `.MatchingResource`, ...; spec §6.8).
    EventRoot,
    /// `.Resources` / `.CloudEvents`: a `null` entry is an empty map.
    EventMaps,
}

/// A template value during a render.
#[derive(Clone, Debug)]
pub enum Val<'a> {
    V(Value),
    J(&'a Json, Shape),
    /// A map key handed out by `range` (a Go string).
    Key(&'a str),
}

/// A value as comparisons see it, borrowed.
#[derive(Clone, Copy)]
pub enum Scalar<'x> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'x str),
    /// Lists, maps, times, versions: compared through [`Value`].
    Other,
}

impl<'a> Val<'a> {
    pub const NIL: Val<'static> = Val::V(Value::Nil);

    /// Go template truth.
    pub fn truth(&self) -> bool {
        match self {
            Val::V(v) => v.truth(),
            Val::Key(k) => !k.is_empty(),
            Val::J(j, _) => match j {
                Json::Null => false,
                Json::Bool(b) => *b,
                Json::Number(n) => match n.as_i64() {
                    Some(i) => i != 0,
                    None => n.as_f64().is_some_and(|f| f != 0.0),
                },
                Json::String(s) => !s.is_empty(),
                Json::Array(a) => !a.is_empty(),
                Json::Object(o) => !o.is_empty(),
            },
        }
    }

    /// The text of a string, borrowed.
    #[inline]
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Val::J(Json::String(s), _) => Some(s),
            Val::Key(k) => Some(k),
            Val::V(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    pub fn scalar(&self) -> Scalar<'_> {
        match self {
            Val::Key(k) => Scalar::Str(k),
            Val::J(j, _) => Scalar::of_json(j),
            Val::V(v) => Scalar::of_value(v),
        }
    }
}

impl<'x> Scalar<'x> {
    pub fn of_json(j: &'x Json) -> Scalar<'x> {
        match j {
            Json::Null => Scalar::Nil,
            Json::Bool(b) => Scalar::Bool(*b),
            Json::Number(n) => match n.as_i64() {
                Some(i) => Scalar::Int(i),
                None => Scalar::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Json::String(s) => Scalar::Str(s),
            Json::Array(_) | Json::Object(_) => Scalar::Other,
        }
    }

    pub fn of_value(v: &'x Value) -> Scalar<'x> {
        match v {
            Value::Nil => Scalar::Nil,
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Int(i) | Value::GoInt(i) => Scalar::Int(*i),
            Value::Float(f) => Scalar::Float(*f),
            Value::String(s) => Scalar::Str(s),
            _ => Scalar::Other,
        }
    }
}

/// The entry `name` of the object `parent` (of shape `shape`), with event-manager's types.
#[inline]
pub fn child<'a>(shape: Shape, name: &str, node: &'a Json) -> Val<'a> {
    if shape != Shape::EventRoot {
        return Val::J(node, Shape::Plain);
    }
    event_child(name, node)
}

/// An entry of the top-level event data, with event-manager's types (spec §6.8).
fn event_child<'a>(name: &str, node: &'a Json) -> Val<'a> {
    // The node's kind first: `.Resource` (an object) is then told apart from the special
    // names by one length comparison instead of a string comparison per name.
    match node {
        Json::Null if matches!(name, "Resource" | "CloudEvent" | "Cluster") => {
            Val::V(Value::map(Map::new()))
        }
        Json::Array(_) if matches!(name, "Resources" | "CloudEvents") => {
            Val::J(node, Shape::EventMaps)
        }
        Json::Array(items) if name == "MatchingResources" => {
            Val::V(Value::list(items.iter().map(object_reference).collect()))
        }
        item if name == "MatchingResource" => Val::V(object_reference(item)),
        _ => Val::J(node, Shape::Plain),
    }
}

/// An element of an array of shape `shape`.
pub fn element(shape: Shape, item: &Json) -> Val<'_> {
    match (shape, item) {
        (Shape::EventMaps, Json::Null) => Val::V(Value::map(Map::new())),
        _ => Val::J(item, Shape::Plain),
    }
}

/// Turns render values into owned values; holds the shared document borrowed nodes live in.
pub struct Root(pub Option<JsonRef>);

impl Root {
    pub fn value(&self, v: Val<'_>) -> Value {
        match v {
            Val::V(v) => v,
            Val::Key(k) => Value::str(k),
            Val::J(j, shape) => self.json(j, shape),
        }
    }

    pub fn value_ref(&self, v: &Val<'_>) -> Value {
        match v {
            Val::V(v) => v.clone(),
            Val::Key(k) => Value::str(k),
            Val::J(j, shape) => self.json(j, *shape),
        }
    }

    fn json(&self, j: &Json, shape: Shape) -> Value {
        if !(j.is_object() || j.is_array()) {
            return Value::from(j);
        }
        let Some(root) = &self.0 else {
            // Borrowed data without a shared document behind it: convert eagerly.
            return match shape {
                Shape::Plain => Value::from(j),
                Shape::EventRoot => doc_event_data(j),
                Shape::EventMaps => match j {
                    Json::Array(items) => Value::list(
                        items
                            .iter()
                            .map(|item| event_entry(&|v| Value::from(v), item))
                            .collect(),
                    ),
                    other => Value::from(other),
                },
            };
        };
        match shape {
            Shape::Plain => lazy_value(&root.child(j)),
            Shape::EventRoot => event_value(root, j),
            Shape::EventMaps => match j {
                Json::Array(items) => Value::list(
                    items
                        .iter()
                        .map(|item| event_entry(&|v| lazy_value(&root.child(v)), item))
                        .collect(),
                ),
                other => lazy_value(&root.child(other)),
            },
        }
    }
}
