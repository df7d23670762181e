//! The Lua sandbox: escapes tried and refused, budgets and memory limits enforced, evaluations
//! isolated from each other, the state still usable after a failure, helper modules present.

use serde_json::{json, Value};
use sluice_domain::eventsource::parse_event_source;
use sluice_eval::{compile_object, CompiledEventSource, EvalError, Limits, Verdict};

fn event_source(script: &str) -> Value {
    json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
        "metadata": {"name": "probe"},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "ConfigMap", "evaluate": script}]}
    })
}

fn config_map() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "cm", "namespace": "default",
                        "labels": {"app": "web"}, "annotations": {"team": "a"}},
           "data": {"payload": "{\"a\": [1, 2], \"b\": \"x\"}"}})
}

fn compile(script: &str) -> CompiledEventSource {
    let limits = Limits {
        instructions: 1_000_000,
        aggregated_instructions: 1_000_000,
        memory_bytes: 16 << 20,
    };
    let es = parse_event_source(&event_source(script)).expect("parses");
    CompiledEventSource::compile_with_limits(&es, limits).expect("compiles")
}

/// Runs `script` and expects a failure whose reason contains `want`; then checks that the same
/// compiled EventSource (same Lua state) still evaluates a harmless object correctly.
fn refused(script: &str, want: &str) {
    let es = compile(script);
    let err = es
        .evaluate_value(&config_map())
        .expect_err("must be refused");
    let EvalError::Script {
        name,
        field,
        reason,
    } = &err
    else {
        panic!("a script error, not {err:?}");
    };
    assert_eq!(name, "probe");
    assert_eq!(field, "spec.resourceSelectors[0].evaluate");
    assert!(
        reason.contains(want),
        "reason {reason:?} should contain {want:?}"
    );
    let ok = compile(
        "function evaluate() return {matching = obj.metadata.name == 'cm', message = 'fine'} end",
    );
    assert_eq!(
        ok.evaluate_value(&config_map()).expect("healthy").message,
        "fine"
    );
}

#[test]
fn infinite_loop_exhausts_the_budget() {
    refused(
        "function evaluate() while true do end end",
        "instruction budget of 1000000 exceeded",
    );
}

#[test]
fn pcall_cannot_swallow_the_budget() {
    refused(
        "function evaluate() while true do pcall(function() while true do end end) end end",
        "instruction budget",
    );
}

#[test]
fn string_rep_memory_bomb_hits_the_memory_limit() {
    refused(
        "function evaluate() local s = string.rep('x', 2^30) return {matching = #s > 0} end",
        "memory limit of 16777216 bytes exceeded",
    );
}

#[test]
fn doubling_concatenation_hits_the_memory_limit() {
    refused(
        "function evaluate() local s = 'x' for i = 1, 40 do s = s .. s end return {matching = true} end",
        "memory limit",
    );
}

#[test]
fn deep_recursion_fails() {
    refused(
        "local function f(n) return f(n + 1) + 1 end function evaluate() return {matching = f(1) > 0} end",
        "",
    );
}

#[test]
fn io_is_absent() {
    refused(
        "function evaluate() local f = io.open('/etc/hostname') return {matching = true} end",
        "attempt to index nil with 'open'",
    );
}

#[test]
fn os_execute_getenv_exit_remove_are_absent() {
    for f in [
        "execute('true')",
        "getenv('HOME')",
        "exit(1)",
        "remove('/tmp/x')",
    ] {
        refused(
            &format!("function evaluate() os.{f} return {{matching = true}} end"),
            "attempt to call a nil value",
        );
    }
}

#[test]
fn require_dofile_loadfile_are_absent() {
    refused(
        "function evaluate() require('os') return {matching = true} end",
        "attempt to call a nil value",
    );
    refused(
        "function evaluate() dofile('/etc/passwd') return {matching = true} end",
        "attempt to call a nil value",
    );
    refused(
        "function evaluate() loadfile('/etc/passwd') return {matching = true} end",
        "attempt to call a nil value",
    );
}

#[test]
fn binary_chunks_cannot_be_loaded() {
    // Luau bytecode is never loadable from a script; string.dump does not exist.
    refused(
        "function evaluate() local f = string.dump(function() end) return {matching = true} end",
        "attempt to call a nil value",
    );
    let es = compile(
        "function evaluate() local ok, f = pcall(loadstring, '\\27Lua\\81\\0\\1\\4\\8\\4\\8\\0') \
         return {matching = ok and type(f) == 'function', message = type(f)} end",
    );
    assert!(!es.evaluate_value(&config_map()).expect("runs").matching);
    // The host side refuses a binary chunk as an EventSource script too.
    let err = compile_object(&event_source("\x1bLua\u{51}\0"))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("lua syntax error"), "{err}");
}

#[test]
fn library_tables_and_globals_are_read_only() {
    refused(
        "function evaluate() string.upper = nil return {matching = true} end",
        "readonly",
    );
    refused(
        "function evaluate() _G.x = 1 return {matching = true} end",
        "readonly",
    );
}

#[test]
fn os_time_date_difftime_clock_stay() {
    let es = compile(
        "function evaluate() return {matching = type(os.time()) == 'number' and type(os.date('%Y')) == 'string' \
         and os.difftime(10, 4) == 6 and type(os.clock()) == 'number', message = tostring(os.getenv)} end",
    );
    assert_eq!(
        es.evaluate_value(&config_map()).expect("runs"),
        Verdict {
            matching: true,
            message: "nil".into()
        }
    );
}

#[test]
fn global_writes_do_not_leak_into_the_next_evaluation() {
    let es = compile(
        "seen = 0\nfunction evaluate() counter = (counter or 0) + 1 seen = seen + 1 hs = {} \
         hs.matching = counter == 1 and seen == 1 hs.message = tostring(counter) return hs end",
    );
    for _ in 0..3 {
        assert_eq!(
            es.evaluate_value(&config_map()).expect("runs"),
            Verdict {
                matching: true,
                message: "1".into()
            }
        );
    }
}

#[test]
fn helper_modules_sveltos_users_expect() {
    let es = compile(
        r#"function evaluate()
  local d = json.decode(obj.data.payload)
  local parts = strings.Split("a,b,c", ",")
  local enc = base64Encode("hello")
  local msg = table.concat({
    tostring(#d.a), d.b, json.encode({}), #parts .. "", tostring(strings.Contains("abc", "b")),
    tostring(strings.HasPrefix("abc", "ab")), strings.ToUpper("x"), strings.TrimSpace("  y "),
    enc, base64Decode(enc), getLabel(obj, "app"), getAnnotation(obj, "team"),
    tostring(getLabel(obj, "nope")), tostring(strings.Index("chicken", "ken")),
    strings.Join(parts, "-"), strings.ReplaceAll("a.b.c", ".", "/")
  }, "|")
  return {matching = true, message = msg}
end"#,
    );
    assert_eq!(
        es.evaluate_value(&config_map()).expect("runs").message,
        "2|x|[]|3|true|true|X|y|aGVsbG8=|hello|web|a|nil|4|a-b-c|a/b/c"
    );
}

#[test]
fn wrong_result_shapes_fail_with_a_reason() {
    for (script, want) in [
        (
            "function evaluate() return 1 end",
            "expected a lua table as return value",
        ),
        (
            "function evaluate() return {matching = 'yes'} end",
            "cannot unmarshal string",
        ),
        (
            "function evaluate() return {matching = true, f = print} end",
            "unsupported type",
        ),
        (
            "function evaluate() local t = {} t.self = t return {matching = true, t = t} end",
            "deeper",
        ),
        (
            "function evaluate() return {matching = true, x = 1/0} end",
            "+Inf",
        ),
    ] {
        refused(script, want);
    }
}

#[test]
fn compiled_event_source_is_send_and_sync_and_usable_from_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledEventSource>();
    let es = std::sync::Arc::new(compile(
        "function evaluate() hs = {} hs.matching = obj.metadata.labels.app == 'web' return hs end",
    ));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let es = es.clone();
            std::thread::spawn(move || {
                (0..200).all(|_| es.evaluate_value(&config_map()).expect("runs").matching)
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().expect("thread finished"));
    }
}

/// `obj` is converted lazily; everything a script can observe must be as if it were converted
/// up front (MapToTable), including iteration, raw access, identity and JSON encoding.
#[test]
fn lazily_converted_objects_behave_like_plain_tables() {
    let es = compile(
        r#"function evaluate()
  local keys = {}
  for k in pairs(obj) do table.insert(keys, k) end
  table.sort(keys)
  local n = 0
  local k = next(obj.metadata)
  while k do n = n + 1 k = next(obj.metadata, k) end
  obj.metadata.labels.extra = "set"
  local enc = json.decode(json.encode(obj))
  local msg = table.concat(keys, ",") .. "|" .. n .. "|" .. tostring(rawget(obj, "data") ~= nil)
    .. "|" .. tostring(obj.metadata == obj.metadata) .. "|" .. tostring(obj.metadata.labels.extra)
    .. "|" .. enc.metadata.labels.app .. "|" .. enc.metadata.labels.extra .. "|" .. tostring(#obj)
    .. "|" .. tostring(obj.nope) .. "|" .. tostring(obj[1])
  return {matching = true, message = msg, keep = obj}
end"#,
    );
    for _ in 0..2 {
        assert_eq!(
            es.evaluate_value(&config_map()).expect("runs").message,
            "apiVersion,data,kind,metadata|4|true|true|set|web|set|0|nil|nil"
        );
    }
}

/// Go decodes result keys case-insensitively in sorted order, the last one winning; a result
/// with nested values goes through the general path and must agree.
#[test]
fn result_keys_match_case_insensitively_last_sorted_wins() {
    for (script, matching, message) in [
        (
            "return {Matching = false, matching = true, MESSAGE = 'a', message = 'b'}",
            true,
            "b",
        ),
        ("return {matching = false, Matching = true}", false, ""),
        (
            "return {matching = true, message = 'x', extra = {1, 2}, n = 1.5}",
            true,
            "x",
        ),
        (
            "return {MATCHING = true, Message = 'y', nested = {a = {b = 'c'}}}",
            true,
            "y",
        ),
    ] {
        let es = compile(&format!("function evaluate() {script} end"));
        assert_eq!(
            es.evaluate_value(&config_map()).expect("runs"),
            Verdict {
                matching,
                message: message.into()
            },
            "{script}"
        );
    }
}

/// The script's global table is reused between objects: nothing a script does to it (or to the
/// shared string metatable) may reach the next object, and the chunk runs before `obj` is set,
/// as in sveltos-agent (`DoString`, then `SetGlobal("obj")`).
#[test]
fn global_table_tricks_do_not_reach_the_next_evaluation() {
    let es = compile(
        "top_obj = obj\n\
         function evaluate()\n\
           local first = leaked == nil and getmetatable(getfenv()) ~= 'x' and top_obj == nil\n\
           local ts, m = tostring, math\n\
           leaked = true\n\
           rawset(getfenv(), 'leaked2', true)\n\
           setmetatable(getfenv(), {__metatable = 'x', __index = function() return 1 end})\n\
           return {matching = first and leaked2 == true, message = ts(m)}\n\
         end",
    );
    for _ in 0..3 {
        let verdict = es.evaluate_value(&config_map()).expect("runs");
        assert!(verdict.matching, "{verdict:?}");
        assert!(verdict.message.starts_with("table"), "{verdict:?}");
    }
    let frozen = compile(
        "function evaluate() local n = seen table.freeze(getfenv()) \
         return {matching = n == nil} end",
    );
    for _ in 0..3 {
        assert!(frozen.evaluate_value(&config_map()).expect("runs").matching);
    }
    refused(
        "function evaluate() getmetatable('').__index = {} return {matching = true} end",
        "readonly",
    );
}

/// An evaluation that fails half-way (the object partly converted) leaves nothing behind.
#[test]
fn a_failed_evaluation_leaves_the_state_clean() {
    let es = compile(
        "function evaluate() local l = obj.metadata.labels if l.app == 'web' and not failed \
         then failed = true error('boom') end return {matching = failed == nil, message = l.app} end",
    );
    let err = es
        .evaluate_value(&config_map())
        .expect_err("first one fails");
    assert!(err.to_string().contains("boom"), "{err}");
    for _ in 0..2 {
        let verdict = es
            .evaluate_value(&config_map())
            .expect_err("fails the same way every time");
        assert!(verdict.to_string().contains("boom"), "{verdict}");
    }
}

/// Small maps of scalars (ports, labels) are cloned from a template of their key set once one
/// was seen (`src/lua/shapes.rs`). A script must not be able to tell: the same object gives the
/// same result, `pairs` order included, whether its maps were built fresh or from templates
/// made from other objects' values, and what a script writes to a table never reaches a later
/// evaluation.
#[test]
fn maps_cloned_from_templates_are_the_maps_built_fresh() {
    let script = r#"function evaluate()
  local parts = {}
  for _, p in ipairs(obj.spec.ports) do
    local kv = {}
    for k, v in pairs(p) do table.insert(kv, k .. "=" .. tostring(v) .. ":" .. type(v)) end
    table.insert(parts, table.concat(kv, ","))
    p.port = -1
    p.extra = "x"
  end
  local labels = {}
  for k, v in pairs(obj.metadata.labels) do table.insert(labels, k .. "=" .. tostring(v)) end
  obj.metadata.labels.app = "changed"
  return {matching = true, message = table.concat(parts, ";") .. "|" .. table.concat(labels, ",")}
end"#;
    let object = |ports: Value, labels: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "namespace": "default", "labels": labels},
               "spec": {"ports": ports}})
    };
    // Within each object every small map has its own key set, so the first evaluation of a
    // new state builds all of them fresh.
    let objects = [
        object(
            json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                   {"name": "b", "port": 2}]),
            json!({"app": "web", "tier": "front"}),
        ),
        // Same key sets, other values and types.
        object(
            json!([{"name": "a", "port": 1, "protocol": "UDP", "targetPort": "metrics"},
                   {"name": "http", "port": 80}]),
            json!({"app": "db", "tier": true}),
        ),
        // Some values equal to the first object's, a null (left out of the table), a key
        // set that alternates with the first one's.
        object(
            json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 9090},
                   {"name": "b", "port": null}]),
            json!({"app": "web", "tier": "front", "zone": "eu"}),
        ),
        object(
            json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443},
                   {"name": "b", "port": 2}]),
            json!({"app": "web", "tier": "back"}),
        ),
    ];
    let fresh: Vec<String> = objects
        .iter()
        .map(|o| compile(script).evaluate_value(o).expect("runs").message)
        .collect();
    let (ports, labels) = fresh[0].split_once('|').expect("two parts");
    let mut first: Vec<&str> = ports
        .split(';')
        .next()
        .expect("a port")
        .split(',')
        .collect();
    first.sort_unstable();
    assert_eq!(
        first,
        [
            "name=http:string",
            "port=80:number",
            "protocol=TCP:string",
            "targetPort=8080:number"
        ]
    );
    let mut labels: Vec<&str> = labels.split(',').collect();
    labels.sort_unstable();
    assert_eq!(labels, ["app=web", "tier=front"]);
    let es = compile(script);
    for round in 0..3 {
        for (i, o) in objects.iter().enumerate() {
            assert_eq!(
                es.evaluate_value(o).expect("runs").message,
                fresh[i],
                "object {i} in round {round}"
            );
        }
    }
}

/// Objects arrive as JSON text: keys in any order, a key even repeated. Scripts see them as
/// `serde_json` maps (and sveltos-agent's decoded maps) hold them: each key once, with its last
/// value, whether the map is converted lazily, whole, or through `pairs`.
#[test]
fn documents_with_unordered_and_repeated_keys_read_as_decoded_maps() {
    let script = r#"
local function dump(t)
  local keys = {}
  for k, _ in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = t[k]
    if type(v) == "table" then v = "{" .. dump(v) .. "}" end
    parts[#parts + 1] = k .. "=" .. tostring(v)
  end
  return table.concat(parts, ",")
end
function evaluate()
  local whole = dump(obj)
  return {matching = obj.metadata.labels.app == "api", message =
    whole .. "|" .. tostring(obj.metadata.name) .. "|" .. dump(obj.metadata.labels)}
end
"#;
    let text = r#"{"metadata": {"namespace": "default", "name": "first",
        "labels": {"tier": "web", "app": "web", "app": "api"}, "name": "cm",
        "annotations": {"b": "2", "a": "1", "c": null}},
        "kind": "Secret", "apiVersion": "v1", "kind": "ConfigMap"}"#;
    let es = compile(script);
    let tape = sluice_eval::Tape::parse(text.as_bytes().to_vec()).expect("a document");
    let decoded: Value = serde_json::from_str(text).expect("parses");
    let want = Verdict {
        matching: true,
        message: "apiVersion=v1,kind=ConfigMap,metadata={annotations={a=1,b=2},\
                  labels={app=api,tier=web},name=cm,namespace=default}|cm|app=api,tier=web"
            .into(),
    };
    assert_eq!(es.evaluate(&tape).expect("runs"), want);
    assert_eq!(es.evaluate_value(&decoded).expect("runs"), want);
}

/// `tostring` of numbers prints what gopher-lua prints (expected text from the oracle's
/// `eventsource` mode): integers that fit int64 whole, others as Go's shortest `%g` (exponent
/// below 1e-4 and from 1e6), `NaN`, `+Inf`, negative zero as `0`; `math.huge` is gopher-lua's
/// largest float64.
#[test]
fn numbers_print_as_gopher_lua_prints_them() {
    let script = r#"function evaluate()
  return {matching = true, message = tostring(1234567.5) .. " " .. tostring(123456.5) .. " " ..
    tostring(0.00001234) .. " " .. tostring(2^63) .. " " .. tostring(-2^63) .. " " ..
    tostring(1e20 + 0.5) .. " " .. tostring(0/0) .. " " .. tostring(5/0) .. " " ..
    tostring(-0.0) .. " " .. tostring(math.huge) .. " " .. tostring(obj.spec.n) .. " " ..
    tostring(obj.spec.f)}
end
"#;
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
                        "spec": {"n": 3, "f": 2.5}});
    let verdict = compile_object(&event_source(script))
        .expect("compiles")
        .evaluate_value(&object)
        .expect("runs");
    assert_eq!(
        verdict.message,
        "1.2345675e+06 123456.5 1.234e-05 9.223372036854776e+18 -9223372036854775808 1e+20 \
         NaN +Inf 0 1.7976931348623157e+308 3 2.5"
    );
}

/// `string.upper`/`string.lower` are Go's `strings.ToUpper`/`ToLower`, as in gopher-lua: every
/// letter, one rune to one rune (expected text from the oracle's `eventsource` mode).
#[test]
fn string_case_maps_every_letter_as_gopher_lua_does() {
    let script = r#"function evaluate()
  return {matching = true, message = string.upper("héllo ß ǆ straße") .. "|" ..
    string.lower("ÉTÉ ΣΑΣ İ") .. "|" .. ("Mixed Ünïcode"):upper() .. "|" .. string.lower("ABC")}
end
"#;
    let verdict = compile_object(&event_source(script))
        .expect("compiles")
        .evaluate_value(&config_map())
        .expect("runs");
    assert_eq!(
        verdict.message,
        "HÉLLO ß Ǆ STRAßE|été σασ i|MIXED ÜNÏCODE|abc"
    );
}

#[test]
fn a_scripts_error_says_its_field_and_line_once() {
    let es = compile(
        "function evaluate()\n  local hs = {}\n  hs.matching = obj.status.phase\n  return hs\nend",
    );
    let err = es
        .evaluate_value(&config_map())
        .expect_err("no status to index");
    assert_eq!(
        err.to_string(),
        "eventsource probe: spec.resourceSelectors[0].evaluate:3: attempt to index nil with 'phase'"
    );
    // A reason that does not place itself is said under its field.
    let es = compile("function evaluate() while true do end end");
    let err = es.evaluate_value(&config_map()).expect_err("budget");
    assert!(
        err.to_string()
            .starts_with("eventsource probe: spec.resourceSelectors[0].evaluate: "),
        "{err}"
    );
}
