//! Escape and exhaustion attempts against the Lua sandbox, with the production limits: each is
//! refused with the kind of refusal it must get (absent, read-only, instruction budget, memory
//! limit, stack, result shape, syntax), within a time bound, without the process growing, and
//! the same EventSource (same Lua state) evaluates the next object correctly afterwards.
//! `sandbox.rs` holds the behaviour tests of the sandbox; this file is the attack table.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_eval::{compile_object, EvalError, LoadError, Verdict};

/// Wall time any attempt may take in a debug build on a busy two-core machine (the instruction
/// budget of 10,000,000 safepoints takes about a second there).
const BOUND: Duration = Duration::from_secs(30);

/// Peak resident memory the test process may reach: the Lua memory limit is 64 MiB per state;
/// an attempt that allocated outside it (in Rust helpers, say) would go far past this.
const PEAK_RSS_BYTES: u64 = 1 << 30;

/// What a refusal must be.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// A global or library function that does not exist in the sandbox.
    Absent,
    /// A field of a table that does not exist (`io.open`, `package.loadlib`).
    AbsentTable(&'static str),
    /// A write to a frozen table (globals, libraries, the string metatable).
    ReadOnly,
    /// The instruction budget (10,000,000 safepoints).
    Budget,
    /// The memory limit (64 MiB on top of the state).
    Memory,
    /// Lua's stack.
    Stack,
    /// The result is not what sveltos-agent reads: the reason contains this.
    Result(&'static str),
    /// The script raised an error: the reason is exactly this.
    Raised(&'static str),
    /// A helper refused its arguments: the reason contains this.
    Helper(&'static str),
}

impl Refusal {
    fn check(self, reason: &str) -> bool {
        match self {
            Refusal::Absent => reason.contains("attempt to call a nil value"),
            Refusal::AbsentTable(field) => {
                reason.contains(&format!("attempt to index nil with '{field}'"))
            }
            Refusal::ReadOnly => reason.contains("attempt to modify a readonly table"),
            Refusal::Budget => reason == "instruction budget of 10000000 exceeded",
            Refusal::Memory => reason == "memory limit of 67108864 bytes exceeded",
            Refusal::Stack => reason.contains("stack overflow"),
            Refusal::Result(want) | Refusal::Helper(want) => reason.contains(want),
            Refusal::Raised(want) => reason == want,
        }
    }
}

fn event_source(name: &str, script: &str) -> Value {
    json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
        "metadata": {"name": name},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "ConfigMap", "evaluate": script}]}
    })
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
           "data": {"k": "v"}})
}

/// `evaluate` wrapped around `body`, then a healthy branch for the follow-up object `ok`.
fn script(body: &str) -> String {
    format!(
        "function evaluate()\n  if obj.metadata.name == 'ok' then return {{matching = true, message = 'fine'}} end\n  {body}\nend"
    )
}

fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Runs each attempt on its own thread with a time bound; checks the refusal, the bound, the
/// process's peak memory and that the state still evaluates a harmless object.
fn refused(cases: &[(&str, &str, Refusal)]) {
    for &(what, body, refusal) in cases {
        let es = compile_object(&event_source("hostile", &script(body))).expect("compiles");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let started = Instant::now();
            let result = es.evaluate_value(&config_map("bad"));
            let took = started.elapsed();
            let after = es.evaluate_value(&config_map("ok"));
            let _ = tx.send((result, took, after));
        });
        let (result, took, after) = rx
            .recv_timeout(BOUND * 2)
            .unwrap_or_else(|_| panic!("{what}: still running after {:?}", BOUND * 2));
        let err = result.expect_err(what);
        let EvalError::Script { reason, .. } = &err else {
            panic!("{what}: a script error, not {err:?}");
        };
        assert!(
            refusal.check(reason),
            "{what}: {reason:?} is not {refusal:?}"
        );
        assert!(took < BOUND, "{what}: took {took:?}");
        let peak = peak_rss();
        assert!(peak < PEAK_RSS_BYTES, "{what}: peak RSS {peak} bytes");
        assert_eq!(
            after.unwrap_or_else(|e| panic!("{what}: the state is unusable: {e}")),
            Verdict {
                matching: true,
                message: "fine".into()
            },
            "{what}"
        );
    }
}

#[test]
fn reaching_outside_the_evaluation_is_refused() {
    refused(&[
        (
            "os.execute",
            "os.execute('touch /tmp/sluice-escaped')",
            Refusal::Absent,
        ),
        (
            "os.getenv",
            "return {matching = os.getenv('HOME') ~= nil}",
            Refusal::Absent,
        ),
        ("os.exit", "os.exit(1)", Refusal::Absent),
        (
            "io.open",
            "io.open('/etc/passwd')",
            Refusal::AbsentTable("open"),
        ),
        ("io.popen", "io.popen('id')", Refusal::AbsentTable("popen")),
        ("require", "require('os')", Refusal::Absent),
        ("dofile", "dofile('/etc/passwd')", Refusal::Absent),
        ("loadfile", "loadfile('/etc/passwd')", Refusal::Absent),
        ("load", "load('return 1')", Refusal::Absent),
        ("string.dump", "string.dump(evaluate)", Refusal::Absent),
        (
            "package.loadlib",
            "package.loadlib('libc.so.6', 'system')",
            Refusal::AbsentTable("loadlib"),
        ),
        (
            "debug.sethook",
            "debug.sethook(function() end, 'l')",
            Refusal::Absent,
        ),
        ("debug.getregistry", "debug.getregistry()", Refusal::Absent),
        (
            "debug.getupvalue",
            "debug.getupvalue(evaluate, 1)",
            Refusal::Absent,
        ),
        (
            "debug.setmetatable",
            "debug.setmetatable('', {})",
            Refusal::Absent,
        ),
        ("collectgarbage", "collectgarbage('stop')", Refusal::Absent),
        ("newproxy", "newproxy(true)", Refusal::Absent),
        (
            "loadstring of bytecode",
            "loadstring('\\27Lua\\81\\0\\1\\4\\8\\4\\8\\0')",
            Refusal::Helper("(loadstring):1: Expected identifier"),
        ),
    ]);
}

#[test]
fn tampering_with_shared_tables_is_refused() {
    refused(&[
        (
            "string metatable __index",
            "getmetatable('').__index = {}",
            Refusal::ReadOnly,
        ),
        (
            "string library",
            "getmetatable('').__index.upper = function() return 'x' end",
            Refusal::ReadOnly,
        ),
        (
            "setmetatable on a string",
            "setmetatable('', {})",
            Refusal::Helper("argument #1"),
        ),
        ("rawset(_G)", "rawset(_G, 'x', 1)", Refusal::ReadOnly),
        (
            "rawset(string)",
            "rawset(string, 'upper', print)",
            Refusal::ReadOnly,
        ),
        (
            "json helper",
            "json.decode = function() return {} end",
            Refusal::ReadOnly,
        ),
        (
            "strings helper",
            "strings.Contains = nil",
            Refusal::ReadOnly,
        ),
        ("table.sort", "table.sort = nil", Refusal::ReadOnly),
        (
            "setfenv of a library",
            "setfenv(string.upper, {})",
            Refusal::Helper("'setfenv' cannot change environment of given object"),
        ),
    ]);
}

#[test]
fn exhaustion_is_stopped_by_the_budget_or_the_memory_limit() {
    refused(&[
        ("while true", "while true do end", Refusal::Budget),
        ("repeat until false", "repeat local x = 1 until false", Refusal::Budget),
        ("numeric for 1e15", "local n = 0 for i = 1, 1e15 do n = n + i end", Refusal::Budget),
        (
            "coroutine endless yields",
            "local co = coroutine.wrap(function() while true do coroutine.yield(1) end end) while true do co() end",
            Refusal::Budget,
        ),
        (
            "coroutine chain",
            "local function spawn() return coroutine.wrap(function() while true do spawn()() end end) end spawn()()",
            Refusal::Stack,
        ),
        (
            "pcall around the loop",
            "while true do pcall(function() while true do end end) end",
            Refusal::Budget,
        ),
        (
            "error handler loops",
            "xpcall(function() error('x') end, function() while true do end end)",
            Refusal::Budget,
        ),
        (
            "__tostring loops",
            "local t = setmetatable({}, {__tostring = function() while true do end end}) local s = tostring(t)",
            Refusal::Budget,
        ),
        ("deep recursion", "local function f(n) return f(n + 1) + 1 end f(1)", Refusal::Stack),
        ("string.rep bomb", "local s = string.rep('x', 2^30)", Refusal::Memory),
        ("string doubling", "local s = 'x' for i = 1, 40 do s = s .. s end", Refusal::Memory),
        ("gsub doubling", "local s = 'xxxx' for i = 1, 40 do s = s:gsub('.', '%0%0') end", Refusal::Memory),
        ("table growth", "local t = {} while true do t[#t + 1] = {} end", Refusal::Memory),
        ("table.create", "local t = table.create(2^25, true)", Refusal::Memory),
        ("table.concat", "local t = table.create(2^20, string.rep('x', 1024)) local s = table.concat(t)", Refusal::Memory),
        ("buffer", "local b = buffer.create(2^29)", Refusal::Memory),
        (
            "catastrophic pattern",
            "local s = string.rep('a', 5000) local p = string.rep('a*', 30) .. 'b' local i = string.find(s, p)",
            Refusal::Budget,
        ),
        (
            "strings.Repeat bomb",
            "local s = strings.Repeat('x', 2^40)",
            Refusal::Helper("strings: value larger than 67108864 bytes"),
        ),
        (
            "strings.ReplaceAll growth",
            "local s = string.rep('x', 2^16) s = strings.ReplaceAll(s, '', s)",
            Refusal::Helper("strings: value larger than 67108864 bytes"),
        ),
        (
            "strings.Join of one big string many times",
            "local big = string.rep('x', 2^24) local t = table.create(2^16, big) local s = strings.Join(t, '')",
            Refusal::Helper("strings: value larger than 67108864 bytes"),
        ),
        (
            "strings.Split into characters",
            "local s = string.rep('x', 2^25) local t = strings.Split(s, '')",
            Refusal::Memory,
        ),
        (
            "json.encode of a shared table",
            "local t = {1} for i = 1, 40 do t = {t, t} end local s, e = json.encode(t) error(e, 0)",
            Refusal::Raised("value larger than 67108864 bytes"),
        ),
        (
            "json.decode of deep nesting",
            "local t, e = json.decode(string.rep('[', 100000)) error(e, 0)",
            Refusal::Helper("recursion limit exceeded"),
        ),
    ]);
}

#[test]
fn results_sveltos_agent_cannot_read_are_refused() {
    refused(&[
        (
            "a number",
            "return 1",
            Refusal::Result("expected a lua table as return value"),
        ),
        (
            "a string",
            "return 'matching'",
            Refusal::Result("expected a lua table as return value"),
        ),
        (
            "nothing",
            "return",
            Refusal::Result("expected a lua table as return value"),
        ),
        (
            "a function",
            "return evaluate",
            Refusal::Result("expected a lua table as return value"),
        ),
        (
            "a coroutine",
            "return coroutine.create(evaluate)",
            Refusal::Result("expected a lua table as return value"),
        ),
        (
            "a cyclic table",
            "local t = {matching = true} t.t = t return t",
            Refusal::Result("deeper"),
        ),
        (
            "a shared table",
            "local t = {1} for i = 1, 40 do t = {t, t} end return {matching = true, t = t}",
            Refusal::Result("value larger than 67108864 bytes"),
        ),
        (
            "error with a table",
            "error({code = 1})",
            Refusal::Raised("(error object is a table value)"),
        ),
        (
            "error with a looping __tostring",
            "error(setmetatable({}, {__tostring = function() while true do end end}))",
            Refusal::Raised("(error object is a table value)"),
        ),
        (
            "error with nil",
            "error(nil)",
            Refusal::Raised("(error object is a nil value)"),
        ),
    ]);
}

/// The result is read raw, as gopher-lua's `ToGoValue` reads it: metamethods on it (which would
/// run outside the instruction budget) are never called.
#[test]
fn metamethods_of_a_result_are_not_run() {
    let es = compile_object(&event_source(
        "hostile",
        "function evaluate() local loop = function() while true do end end \
         return setmetatable({matching = true, n = {1}}, {__index = loop, __len = loop, \
         __iter = loop, __tostring = loop}) end",
    ))
    .expect("compiles");
    let started = Instant::now();
    assert!(es.evaluate_value(&config_map("cm")).expect("runs").matching);
    assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
}

/// Scripts that do not compile fail at load time, naming the field (and the line); a huge
/// script either compiles or fails the same way, quickly.
#[test]
fn scripts_that_do_not_compile_fail_to_load() {
    let syntax = |text: &str| match compile_object(&event_source("hostile", text)) {
        Err(e @ LoadError::LuaSyntax { .. }) => e.to_string(),
        Err(other) => panic!("a syntax error, not {other:?}"),
        Ok(_) => panic!("{text:.40} compiled"),
    };
    assert!(syntax("function evaluate(")
        .contains("spec.resourceSelectors[0].evaluate line 1: lua syntax error"));
    let started = Instant::now();
    let nested = format!(
        "function evaluate() return {}1{} end",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    assert!(syntax(&nested).contains("lua syntax error"));
    let tables = format!(
        "function evaluate() return {}{} end",
        "{".repeat(100_000),
        "}".repeat(100_000)
    );
    assert!(syntax(&tables).contains("lua syntax error"));
    // A megabyte of statements (an EventSource cannot be much larger in etcd).
    let huge = format!(
        "function evaluate()\n{}return {{matching = true}} end",
        "local x = 1\n".repeat(90_000)
    );
    let verdict = compile_object(&event_source("hostile", &huge));
    let es = verdict.expect("a megabyte script compiles");
    assert!(es.evaluate_value(&config_map("cm")).expect("runs").matching);
    assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
}

/// Nothing one EventSource's script does reaches another EventSource, or the next object.
#[test]
fn state_never_leaks_between_evaluations_or_event_sources() {
    let writer = compile_object(&event_source(
        "writer",
        "function evaluate() leaked = 'yes' rawset(getfenv(), 'raw', 'yes') \
         obj.metadata.name = 'changed' obj.metadata.labels.app = 'changed' \
         return {matching = true, message = obj.metadata.name} end",
    ))
    .expect("compiles");
    let reader = compile_object(&event_source(
        "reader",
        "function evaluate() return {matching = leaked == nil and raw == nil, \
         message = obj.metadata.name .. '/' .. obj.metadata.labels.app} end",
    ))
    .expect("compiles");
    let object = config_map("cm");
    for _ in 0..3 {
        assert_eq!(
            writer.evaluate_value(&object).expect("runs").message,
            "changed"
        );
        assert_eq!(
            reader.evaluate_value(&object).expect("runs"),
            Verdict {
                matching: true,
                message: "cm/web".into()
            }
        );
    }
    assert_eq!(
        object,
        config_map("cm"),
        "the input object is never mutated"
    );
}
