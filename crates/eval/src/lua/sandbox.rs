//! The sandboxed Lua (Luau) environment EventSource scripts run in: which globals exist, the
//! helper modules Sveltos users expect (`json`, `strings`, `base64Encode`, `base64Decode`,
//! `getLabel`, `getAnnotation`), and the global table of each script, which the runtime empties
//! before every evaluation. Does not convert objects or read results (see `convert`).

use base64::Engine as _;
use mlua::{Function, Lua, Table, Value as LuaValue};
use serde_json::Value;

use super::shapes::{ShapeCache, SLOTS};
use super::{convert, lazy};

/// Trusted setup code, run once per state before the globals are frozen. It removes everything
/// that reaches outside the evaluation (there is no `io`, no `os.execute`, no file loading in Luau
/// to begin with; `require`, `print` and `collectgarbage` are removed or neutered here), keeps
/// `os.time`/`os.date`/`os.difftime`/`os.clock` and installs the Lua-side helpers.
const SETUP: &str = r#"
local G, materialize, pairs, next, rawget, numstr, upper, lower = ...
G.require = nil
G.print = function() end
G.collectgarbage = nil
G.newproxy = nil
local rawtostring = G.tostring
-- Numbers print as gopher-lua prints them (integers that fit int64 whole, others as Go's %v:
-- "1e-05", "9.223372036854776e+18", "NaN", "+Inf"; negative zero as "0"), not as Luau does.
G.tostring = function(v)
  if type(v) == "number" then return numstr(v) end
  return rawtostring(v)
end
-- gopher-lua's math.huge is the largest float64, not infinity.
G.math.huge = 1.7976931348623157e308
-- gopher-lua's string.upper/lower are Go's strings.ToUpper/ToLower (every letter, not ASCII only).
G.string.upper, G.string.lower = upper, lower
G.getLabel = function(obj, key)
  local m = type(obj) == "table" and obj.metadata
  local l = type(m) == "table" and m.labels
  if type(l) ~= "table" then return nil end
  return l[key]
end
G.getAnnotation = function(obj, key)
  local m = type(obj) == "table" and obj.metadata
  local a = type(m) == "table" and m.annotations
  if type(a) ~= "table" then return nil end
  return a[key]
end

-- Lazily converted objects (see lazy.rs) are materialized before anything iterates them:
-- `pairs`, `next` and `rawget` are C functions doing it, `json.encode` walks the value first.
local rawnext, encode = G.next, G.json.encode
G.pairs, G.next, G.rawget = pairs, next, rawget
local function deep(v, seen)
  if type(v) == "table" and not seen[v] then
    seen[v] = true
    materialize(v)
    for _, child in rawnext, v do deep(child, seen) end
  end
end
G.json.encode = function(v)
  deep(v, {})
  return encode(v)
end
"#;

/// What `install` sets up: the lazy-conversion tables and the metatable of script globals.
pub(crate) struct Sandbox {
    /// Proxy -> JSON node of the running evaluation (see `lazy.rs`); empty between evaluations.
    pub ptrs: Table,
    /// The metatable of lazily converted maps.
    pub lazy_meta: Table,
    /// The templates of small maps (see `shapes.rs`).
    pub shapes: Table,
    /// The metatable of every script's own global table: reads fall through to the frozen
    /// globals.
    pub env_meta: Table,
}

/// Builds the sandboxed, frozen globals in `lua`. `cache` is the state's shape cache: it must
/// outlive the state and be used by one evaluation at a time.
pub(crate) fn install(lua: &Lua, cache: *mut ShapeCache) -> mlua::Result<Sandbox> {
    let globals = lua.globals();
    install_rust_helpers(lua, &globals)?;
    let ptrs = lua.create_table()?;
    let lazy_meta = lua.create_table()?;
    let shapes = lua.create_table_with_capacity(SLOTS, 0)?;
    let original_next: Function = globals.get("next")?;
    // SAFETY: pushes five C closures over PTRS, the proxy metatable, SHAPES and the cache
    // (`pairs` also over the original `next`); `exec_raw` runs this in a protected call and
    // pops the five results.
    let (index, materialize, pairs, next, rawget): (
        Function,
        Function,
        Function,
        Function,
        Function,
    ) = unsafe {
        lua.exec_raw((&ptrs, &lazy_meta, &shapes, &original_next), |state| {
            use mlua::ffi;
            let top = ffi::lua_gettop(state);
            let (p, m, s, n) = (top - 3, top - 2, top - 1, top);
            for (f, name, with_next) in [
                (lazy::index as ffi::lua_CFunction, c"lazy_index", false),
                (lazy::materialize, c"lazy_materialize", false),
                (lazy::pairs, c"pairs", true),
                (lazy::next, c"next", false),
                (lazy::rawget, c"rawget", false),
            ] {
                ffi::lua_pushvalue(state, p);
                ffi::lua_pushvalue(state, m);
                ffi::lua_pushvalue(state, s);
                ffi::lua_pushlightuserdata(state, cache.cast());
                if with_next {
                    ffi::lua_pushvalue(state, n);
                }
                let upvalues = lazy::UPVALUES + i32::from(with_next);
                ffi::lua_pushcclosurek(state, f, name.as_ptr(), upvalues, None);
            }
            for _ in 0..4 {
                ffi::lua_remove(state, p);
            }
        })?
    };
    lazy_meta.raw_set("__index", index)?;
    lazy_meta.raw_set("__metatable", false)?;
    let numstr = lua.create_function(|_, n: f64| Ok(super::convert::format_number(n)))?;
    let upper = lua.create_function(|lua, s: mlua::LuaString| {
        go_case(lua, &s, sluice_domain::gocase::push_upper)
    })?;
    let lower = lua.create_function(|lua, s: mlua::LuaString| {
        go_case(lua, &s, sluice_domain::gocase::push_lower)
    })?;
    lua.load(SETUP).set_name("=sluice-sandbox").call::<()>((
        globals.clone(),
        materialize,
        pairs,
        next,
        rawget,
        numstr,
        upper,
        lower,
    ))?;
    let env_meta = lua.create_table()?;
    env_meta.raw_set("__index", globals.clone())?;
    freeze(lua, &globals)?;
    env_meta.set_readonly(true);
    Ok(Sandbox {
        ptrs,
        lazy_meta,
        shapes,
        env_meta,
    })
}

/// Go's `strings.ToUpper`/`ToLower` over a Lua string: ASCII text byte by byte, other text rune
/// by rune, where a byte that is not part of a UTF-8 character becomes U+FFFD (Go's
/// `strings.Map` does that).
fn go_case(
    lua: &Lua,
    s: &mlua::LuaString,
    push: fn(&mut String, &str),
) -> mlua::Result<mlua::LuaString> {
    let bytes = s.as_bytes();
    let text = sluice_domain::gocase::lossy(&bytes);
    let mut out = String::with_capacity(text.len());
    push(&mut out, &text);
    lua.create_string(out)
}

/// Makes the globals and every library table read-only, so that one evaluation cannot change
/// what the next one sees (scripts' own globals go to their per-evaluation table).
fn freeze(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    for pair in globals.pairs::<LuaValue, LuaValue>() {
        if let (_, LuaValue::Table(t)) = pair? {
            t.set_readonly(true);
        }
    }
    globals.set_readonly(true);
    // The metatable of strings (`("").upper`) is shared by every evaluation too.
    lua.load("table.freeze(getmetatable(''))")
        .set_name("=sluice-sandbox")
        .exec()
}

fn install_rust_helpers(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    globals.set(
        "base64Encode",
        lua.create_function(|lua, s: mlua::LuaString| {
            lua.create_string(base64::engine::general_purpose::STANDARD.encode(s.as_bytes()))
        })?,
    )?;
    globals.set(
        "base64Decode",
        lua.create_function(|lua, s: mlua::LuaString| {
            match base64::engine::general_purpose::STANDARD.decode(s.as_bytes()) {
                Ok(bytes) => Ok((LuaValue::String(lua.create_string(bytes)?), LuaValue::Nil)),
                Err(e) => Ok((
                    LuaValue::Nil,
                    LuaValue::String(lua.create_string(format!("base64 decode failed: {e}"))?),
                )),
            }
        })?,
    )?;

    let json = lua.create_table()?;
    json.set(
        "encode",
        lua.create_function(|lua, v: LuaValue| match convert::to_json(&v) {
            Ok(value) => {
                let text = serde_json::to_string(&empty_objects_as_arrays(value))
                    .map_err(mlua::Error::external)?;
                Ok((LuaValue::String(lua.create_string(text)?), LuaValue::Nil))
            }
            Err(e) => Ok((LuaValue::Nil, LuaValue::String(lua.create_string(e)?))),
        })?,
    )?;
    json.set(
        "decode",
        lua.create_function(|lua, s: mlua::LuaString| {
            match serde_json::from_slice::<Value>(&s.as_bytes()) {
                Ok(v) => Ok((plain_to_lua(lua, &v)?, LuaValue::Nil)),
                Err(e) => Ok((
                    LuaValue::Nil,
                    LuaValue::String(lua.create_string(format!("json decode failed: {e}"))?),
                )),
            }
        })?,
    )?;
    globals.set("json", json)?;
    globals.set("strings", strings_module(lua)?)?;
    Ok(())
}

/// `json.encode` writes an empty table as `[]`, as libsveltos' json module does.
fn empty_objects_as_arrays(v: Value) -> Value {
    match v {
        Value::Object(m) if m.is_empty() => Value::Array(Vec::new()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, empty_objects_as_arrays(v)))
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(empty_objects_as_arrays).collect())
        }
        other => other,
    }
}

/// JSON into Lua for `json.decode`: every array element is kept (no `MapToTable` quirks).
fn plain_to_lua(lua: &Lua, v: &Value) -> mlua::Result<LuaValue> {
    Ok(match v {
        Value::Null => LuaValue::Nil,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => LuaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, plain_to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        Value::Object(m) => {
            let t = lua.create_table_with_capacity(0, m.len())?;
            for (k, item) in m {
                t.raw_set(k.as_str(), plain_to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
    })
}

/// The `strings` module: Go's `strings` package functions with Go's names and semantics
/// (byte indices are 0-based, -1 when absent).
fn strings_module(lua: &Lua) -> mlua::Result<Table> {
    let m = lua.create_table()?;
    macro_rules! f2 {
        ($name:literal, |$a:ident, $b:ident| $body:expr) => {
            m.set(
                $name,
                lua.create_function(|_, ($a, $b): (String, String)| Ok($body))?,
            )?;
        };
    }
    macro_rules! f1 {
        ($name:literal, |$a:ident| $body:expr) => {
            m.set($name, lua.create_function(|_, $a: String| Ok($body))?)?;
        };
    }
    f2!("Contains", |s, sub| s.contains(sub.as_str()));
    f2!("ContainsAny", |s, chars| s
        .chars()
        .any(|c| chars.contains(c)));
    f2!("HasPrefix", |s, p| s.starts_with(p.as_str()));
    f2!("HasSuffix", |s, p| s.ends_with(p.as_str()));
    f2!("Index", |s, sub| s
        .find(sub.as_str())
        .map_or(-1, |i| i as i64));
    f2!("LastIndex", |s, sub| s
        .rfind(sub.as_str())
        .map_or(-1, |i| i as i64));
    f2!("Count", |s, sub| if sub.is_empty() {
        s.chars().count() as i64 + 1
    } else {
        s.matches(sub.as_str()).count() as i64
    });
    f2!("EqualFold", |a, b| a.to_lowercase() == b.to_lowercase());
    f2!("Compare", |a, b| match a.cmp(&b) {
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Greater => 1,
    });
    f2!("TrimPrefix", |s, p| s
        .strip_prefix(p.as_str())
        .unwrap_or(&s)
        .to_string());
    f2!("TrimSuffix", |s, p| s
        .strip_suffix(p.as_str())
        .unwrap_or(&s)
        .to_string());
    f2!("Trim", |s, cut| s
        .trim_matches(|c| cut.contains(c))
        .to_string());
    f2!("TrimLeft", |s, cut| s
        .trim_start_matches(|c| cut.contains(c))
        .to_string());
    f2!("TrimRight", |s, cut| s
        .trim_end_matches(|c| cut.contains(c))
        .to_string());
    f1!("ToLower", |s| s.to_lowercase());
    f1!("ToUpper", |s| s.to_uppercase());
    f1!("TrimSpace", |s| s.trim().to_string());
    m.set(
        "ReplaceAll",
        lua.create_function(|_, (s, old, new): (String, String, String)| {
            replaced_len(&s, &old, &new, -1)?;
            Ok(s.replace(old.as_str(), &new))
        })?,
    )?;
    m.set(
        "Replace",
        lua.create_function(|_, (s, old, new, n): (String, String, String, i64)| {
            replaced_len(&s, &old, &new, n)?;
            Ok(if n < 0 {
                s.replace(old.as_str(), &new)
            } else {
                s.replacen(old.as_str(), &new, n as usize)
            })
        })?,
    )?;
    m.set(
        "Repeat",
        lua.create_function(|_, (s, n): (String, i64)| {
            if n < 0 {
                return Err(mlua::Error::runtime("strings: negative Repeat count"));
            }
            built(
                s.len()
                    .saturating_mul(usize::try_from(n).unwrap_or(usize::MAX)),
            )?;
            Ok(s.repeat(n as usize))
        })?,
    )?;
    m.set(
        "Split",
        lua.create_function(|lua, (s, sep): (String, String)| {
            // Straight into Lua strings, under the state's memory limit.
            if sep.is_empty() {
                sequence(lua, s.char_indices().map(|(i, c)| &s[i..i + c.len_utf8()]))
            } else {
                sequence(lua, s.split(sep.as_str()))
            }
        })?,
    )?;
    m.set(
        "Fields",
        lua.create_function(|lua, s: String| sequence(lua, s.split_whitespace()))?,
    )?;
    m.set(
        "Join",
        lua.create_function(|_, (parts, sep): (Table, String)| {
            let mut out = Vec::new();
            let mut size = 0usize;
            for item in parts.sequence_values::<mlua::LuaString>() {
                let item = item?;
                size = size.saturating_add(item.as_bytes().len() + sep.len());
                built(size)?;
                out.push(item.to_str()?.to_string());
            }
            Ok(out.join(&sep))
        })?,
    )?;
    Ok(m)
}

/// A Lua array of `parts`, built one string at a time.
fn sequence<'s>(lua: &Lua, parts: impl Iterator<Item = &'s str>) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    for (i, part) in parts.enumerate() {
        table.raw_set(i + 1, part)?;
    }
    Ok(table)
}

/// Refuses a result a Rust helper would build larger than `convert::MAX_BUILT_BYTES`.
fn built(size: usize) -> mlua::Result<()> {
    convert::check_built(size).map_err(|e| mlua::Error::runtime(format!("strings: {e}")))
}

/// Checks the length of `s` with `old` replaced by `new` (at most `n` times when `n` is not
/// negative; an empty `old` matches before every character and at the end, as in Go).
fn replaced_len(s: &str, old: &str, new: &str, n: i64) -> mlua::Result<()> {
    if new.len() <= old.len() {
        return Ok(());
    }
    let matches = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old).count()
    };
    let matches = match usize::try_from(n) {
        Ok(n) => matches.min(n),
        Err(_) => matches,
    };
    built(
        s.len()
            .saturating_add(matches.saturating_mul(new.len() - old.len())),
    )
}
