//! Templates that loop or allocate without bound: each render is stopped with an execution
//! error that names the limit, within a time bound, on a render thread's 2 MiB stack (the
//! renderer renders on `spawn_blocking` threads).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;
use sluice_template::{event_data, Engine, Error, ErrorKind, Options, Template};

/// Wall time any hostile render may take in a debug build on a busy two-core machine; an
/// unbounded one would take hours or exhaust memory.
const BOUND: Duration = Duration::from_secs(30);

/// Parses and renders `text` on a 2 MiB thread; the rendered length or the error, and how long
/// it took. A render still running after twice the bound fails the test instead of hanging it.
fn render(engine: Engine, text: &str) -> (Result<usize, Error>, Duration) {
    render_with(engine, text, json!({"l": [1, 2, 3]}))
}

/// [`render`] of `data`.
fn render_with(
    engine: Engine,
    text: &str,
    data: serde_json::Value,
) -> (Result<usize, Error>, Duration) {
    let options = Options {
        engine,
        ..Options::default()
    };
    let text = text.to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let started = Instant::now();
            let result = Template::parse(&text, &options)
                .and_then(|t| t.render(&event_data(&data)))
                .map(|out| out.len());
            let _ = tx.send((result, started.elapsed()));
        })
        .expect("spawn");
    rx.recv_timeout(BOUND * 2).expect("the render ends")
}

/// Every case must fail at execution (it parses) with a message containing `want`, in time.
fn stopped(engine: Engine, cases: &[(&str, &str)]) {
    stopped_with(engine, &json!({"l": [1, 2, 3]}), cases);
}

/// [`stopped`] over `data`.
fn stopped_with(engine: Engine, data: &serde_json::Value, cases: &[(&str, &str)]) {
    for (text, want) in cases {
        let (result, took) = render_with(engine, text, data.clone());
        let err = result.expect_err(text);
        assert_eq!(err.kind(), ErrorKind::Exec, "{text}: {err}");
        assert!(
            err.message().contains(want),
            "{text}: {:?} should contain {want:?}",
            err.message()
        );
        assert!(took < BOUND, "{text}: took {took:?}");
    }
}

const STRING_BUDGET: &str = "exceeds the template budget of 16777216";
const LIST_BUDGET: &str = "exceeds the template budget of 1048576";

/// A function result fed back into the function doubles each time round the loop: 24 rounds
/// would be 128 MiB of string (and 40 rounds 8 TiB); each is stopped at 16 MiB.
#[test]
fn results_fed_back_into_their_function_stop_at_the_string_budget() {
    let grow = |call: &str| {
        format!(
            "{{{{ $s := \"xxxxxxxx\" }}}}{{{{ range until 24 }}}}{{{{ $s = {call} }}}}{{{{ end }}}}{{{{ len $s }}}}"
        )
    };
    for (call, prefix) in [
        ("print $s $s", "error calling print: "),
        ("cat $s $s", "error calling cat: "),
        ("printf \"%s%s\" $s $s", "error calling printf: "),
        ("replace \"x\" \"xx\" $s", "error calling replace: "),
        ("repeat 2 $s", "error calling repeat: "),
        ("toJson (list $s $s)", "error calling toJson: "),
        ("b64enc (print $s $s)", "error calling "),
        ("join $s (list $s $s)", "error calling join: "),
        ("nospace (print $s \" \" $s)", "error calling "),
    ] {
        let text = grow(call);
        let (result, took) = render(Engine::Text, &text);
        let err = result.expect_err(&text);
        let message = err.message();
        assert!(
            message.starts_with(prefix) && message.ends_with(STRING_BUDGET),
            "{text}: {message:?}"
        );
        assert!(took < BOUND, "{text}: took {took:?}");
    }
}

/// Lists that double, flat or nested (a nested list counts as often as it occurs, so printing
/// or encoding it cannot run away either).
#[test]
fn growing_lists_stop_at_the_list_budget() {
    stopped(
        Engine::Text,
        &[
            (
                "{{ $l := list 1 2 }}{{ range until 24 }}{{ $l = concat $l $l }}{{ end }}{{ len $l }}",
                LIST_BUDGET,
            ),
            (
                "{{ $l := list 1 }}{{ range until 40 }}{{ $l = list $l $l }}{{ end }}{{ $l }}",
                LIST_BUDGET,
            ),
            (
                "{{ $l := list 1 }}{{ range until 40 }}{{ $l = append $l $l }}{{ end }}{{ toJson $l }}",
                LIST_BUDGET,
            ),
            ("{{ range seq 1 100000000 }}x{{ end }}", LIST_BUDGET),
            ("{{ until 1000000000 }}", LIST_BUDGET),
        ],
    );
}

#[test]
fn loops_and_recursion_stop_at_the_step_and_depth_limits() {
    stopped(
        Engine::Text,
        &[
            (
                "{{ range until 1000000 }}{{ range until 1000000 }}{{ end }}{{ end }}",
                "template exceeded its budget of steps",
            ),
            (
                "{{ range until 1000000 }}{{ range $.l }}{{ range $.l }}{{ range until 1000 }}{{ end }}{{ end }}{{ end }}{{ end }}",
                "template exceeded its budget of steps",
            ),
            (
                "{{ define \"a\" }}{{ template \"a\" . }}{{ end }}{{ template \"a\" . }}",
                "exceeded maximum template depth (160)",
            ),
            (
                "{{ define \"a\" }}{{ template \"b\" . }}{{ end }}{{ define \"b\" }}{{ range $.l }}{{ template \"a\" $ }}{{ end }}{{ end }}{{ template \"a\" . }}",
                "exceeded maximum template depth (160)",
            ),
            (
                "{{ range until 1000000 }}{{ printf \"%0100d\" 1 }}{{ end }}",
                "template exceeded its budget of output bytes",
            ),
        ],
    );
}

/// Go's `fmt` caps a width or precision: a huge one prints a bounded field, not a bomb.
#[test]
fn huge_printf_widths_print_a_bounded_field() {
    let (result, took) = render(Engine::Text, "{{ printf \"%099999999d\" 1 }}");
    let len = result.expect("renders");
    assert!(len <= 1 << 20, "{len} bytes");
    assert!(took < BOUND, "took {took:?}");
}

/// Tera has no budget of its own: its `range` is held to the list budget over the whole
/// render, nested calls included, and a `step_by` of 0 (an endless range) is refused.
#[test]
fn tera_ranges_stop_at_the_list_budget() {
    stopped(
        Engine::Tera,
        &[
            (
                "{% for i in range(end=100000000) %}{% endfor %}",
                LIST_BUDGET,
            ),
            (
                "{% for i in range(end=100000) %}{% for j in range(end=100000) %}{% endfor %}{% endfor %}",
                LIST_BUDGET,
            ),
            (
                "{% for i in range(end=10, step_by=0) %}{% endfor %}",
                "step_by",
            ),
        ],
    );
    let (result, _) = render(
        Engine::Tera,
        "{% for i in range(start=2, end=9, step_by=3) %}{{ i }},{% endfor %}",
    );
    assert_eq!(result.expect("renders"), "2,5,8,".len());
}

/// Holding results to the budgets costs a list built one element at a time nothing extra:
/// 5,000 appends copy 12.5 million elements, more than the step budget, and still render.
#[test]
fn lists_built_one_element_at_a_time_stay_within_the_budget() {
    let (result, took) = render(
        Engine::Text,
        "{{ $l := list }}{{ range until 5000 }}{{ $l = append $l . }}{{ end }}{{ len $l }}",
    );
    assert_eq!(result.expect("renders"), "5000".len());
    assert!(took < BOUND, "took {took:?}");
}

/// A map set inside itself (directly, or through a list or another map) would make printing
/// or encoding it overflow the render thread's stack and abort the process: `set` refuses it.
#[test]
fn a_map_cannot_be_set_inside_itself() {
    // The check walks at most `MAX_DEPTH` levels: a loop nesting maps through `set` is refused
    // at the depth limit, quickly (walking the whole chain on every `set`, 4,000 levels took
    // seconds; the bound is generous for a debug build on a busy machine).
    let (result, took) = render(
        Engine::Text,
        "{{ $d := dict }}{{ range until 4000 }}{{ $n := dict }}{{ $_ := set $n \"a\" $d }}{{ $d = $n }}{{ end }}{{ len $d }}",
    );
    let err = result.expect_err("nested 4,000 levels through set");
    assert!(
        err.message().contains(
            "error calling set: value nested more than 1000 levels deep exceeds the template depth limit"
        ),
        "{err}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // Up to the limit, the chain builds.
    let (result, _) = render(
        Engine::Text,
        "{{ $d := dict }}{{ range until 1000 }}{{ $n := dict }}{{ $_ := set $n \"a\" $d }}{{ $d = $n }}{{ end }}{{ len $d }}",
    );
    assert_eq!(result.expect("nested 1,000 levels through set"), 1);
    stopped(
        Engine::Text,
        &[
            (
                "{{ $d := dict }}{{ $_ := set $d \"self\" $d }}{{ toJson $d }}",
                "error calling set: cannot set a map inside itself",
            ),
            (
                "{{ $d := dict }}{{ $_ := set $d \"l\" (list 1 (dict \"d\" $d)) }}{{ $d }}",
                "error calling set: cannot set a map inside itself",
            ),
        ],
    );
    // A map holding another map twice is no cycle.
    let (result, _) = render(
        Engine::Text,
        "{{ $d := dict }}{{ $e := dict \"x\" 1 }}{{ $_ := set $d \"a\" $e }}{{ $_ := set $d \"b\" $e }}{{ toJson $d }}",
    );
    assert_eq!(
        result.expect("renders"),
        r#"{"a":{"x":1},"b":{"x":1}}"#.len()
    );
}

/// A map or list held many times over (shared, not copied: building it is cheap) is refused
/// before a function prints, encodes or copies it, or the output prints it: 40 rounds of
/// `dict "a" $d "b" $d` would print 2^40 maps.
#[test]
fn maps_held_many_times_over_are_refused_before_they_are_expanded() {
    let dag = |use_: &str| {
        format!(
            "{{{{ $d := dict }}}}{{{{ range $i := until 40 }}}}{{{{ $d = dict \"a\" $d \"b\" $d }}}}{{{{ end }}}}{use_}"
        )
    };
    let mut cases: Vec<(String, String)> = [
        "toJson",
        "toPrettyJson",
        "toYaml",
        "toString",
        "print",
        "printf \"%v\"",
        "deepCopy",
        "cat",
        "quote",
        "toToml",
    ]
    .iter()
    .map(|f| {
        let name = f.split(' ').next().unwrap_or(f);
        (
            dag(&format!("{{{{ {f} $d }}}}")),
            format!(
                "error calling {name}: printed value of more than 16777216 bytes {STRING_BUDGET}"
            ),
        )
    })
    .collect();
    cases.push((
        dag("{{ $d }}"),
        "printed value of more than 67108864 bytes exceeds the template budget of 67108864".into(),
    ));
    cases.push((
        dag("{{ list $d | toJson }}"),
        format!("error calling toJson: printed value of more than 16777216 bytes {STRING_BUDGET}"),
    ));
    // Lists hold maps too.
    cases.push((
        "{{ $d := dict }}{{ range until 40 }}{{ $d = dict \"l\" (list $d $d) }}{{ end }}{{ toJson $d }}"
            .into(),
        format!("error calling toJson: printed value of more than 16777216 bytes {STRING_BUDGET}"),
    ));
    // A chain too deep to print on the render thread's stack.
    cases.push((
        "{{ $d := dict }}{{ range until 1200 }}{{ $d = dict \"a\" $d }}{{ end }}{{ toJson $d }}"
            .into(),
        "value nested more than 1000 levels deep exceeds the template depth limit".into(),
    ));
    let cases: Vec<(&str, &str)> = cases
        .iter()
        .map(|(t, w)| (t.as_str(), w.as_str()))
        .collect();
    stopped(Engine::Text, &cases);
    // Shared maps that fit print in full.
    let (result, _) = render(
        Engine::Text,
        "{{ $d := dict \"x\" 1 }}{{ range until 3 }}{{ $d = dict \"a\" $d \"b\" $d }}{{ end }}{{ toJson $d }}",
    );
    assert_eq!(result.expect("renders"), 133);
}

/// Tera's `~` has no hook: a variable concatenated with itself in a loop (`set_global`: a plain
/// `set` in a loop starts again every iteration; 40 rounds would be 2^40 bytes) is refused
/// before the render, as is any `set_global` in a loop that reads variables set in the loop
/// twice, and a `set` written out many times over (no loop: 2^40 bytes in 40 lines).
/// Accumulating one piece at a time still renders.
#[test]
fn tera_variables_doubled_are_refused() {
    let unrolled =
        "{% set s = \"x\" %}".to_string() + &"{% set s = s ~ s %}".repeat(40) + "{{ s }}";
    stopped(
        Engine::Tera,
        &[
            (
                "{% set_global s = \"x\" %}{% for i in range(end=40) %}{% set_global s = s ~ s %}{% endfor %}{{ s }}",
                "`set_global s` in a loop uses variables set in the loop 2 times",
            ),
            (
                "{% set_global s = \"x\" %}{% set_global t = \"y\" %}{% for i in l %}{% for j in range(end=40) %}{% set_global s = s ~ t %}{% set_global t = t ~ s %}{% endfor %}{% endfor %}{{ s }}",
                "`set_global s` in a loop uses variables set in the loop 2 times",
            ),
            (
                "{% set_global s = \"x\" %}{% for i in range(end=40) %}{% set_global s = s | replace(from=\"x\", to=s) %}{% endfor %}{{ s }}",
                "`set_global s` in a loop uses variables set in the loop 2 times",
            ),
            (
                &unrolled,
                "`set s` to 128 copies of values exceeds the template budget of 64 copies",
            ),
        ],
    );
    for (text, len) in [
        (
            "{% set_global s = \"\" %}{% for i in l %}{% set_global s = s ~ i ~ \",\" %}{% endfor %}{{ s }}",
            "1,2,3,".len(),
        ),
        // A plain `set` in a loop starts from the outer value every iteration.
        (
            "{% set s = \"x\" %}{% for i in l %}{% set s = s ~ s %}{{ s }}{% endfor %}",
            6,
        ),
        ("{% set a = \"ab\" %}{% set b = a ~ \"-\" ~ a %}{{ b }}", 5),
    ] {
        let (result, _) = render(Engine::Tera, text);
        assert_eq!(result.expect(text), len, "{text}");
    }
}

/// Loops nested over large data are finite but would run for hours: their iterations, the
/// lengths of the lists multiplied, are held to a budget before the render starts.
#[test]
fn tera_loops_nested_over_large_data_are_refused() {
    let xs: Vec<u32> = (0..10_000).collect();
    // One item of 10,000 ports, the others of 3.
    let items: Vec<_> = (0..10_000)
        .map(|i| json!({"name": i, "ports": if i == 0 { xs.clone() } else { vec![1, 2, 3] }}))
        .collect();
    let data = json!({"xs": xs, "items": items, "l": [1, 2, 3]});
    let budget = "exceeds the template budget of 10000000 iterations";
    let cases = [
        (
            "{% for a in xs %}{% for b in xs %}{% for c in xs %}{% endfor %}{% endfor %}{% endfor %}",
            "for loop over `xs` (10000 iterations) nested in loops of 10000 iterations",
        ),
        // Through an outer loop's variable: the longest of its lists counts.
        (
            "{% for i in items %}{% for p in i.ports %}{% endfor %}{% endfor %}",
            "for loop over `i.ports` (10000 iterations) nested in loops of 10000 iterations",
        ),
        // Through a variable set to data, and a filter that keeps a subset.
        (
            "{% set all = items %}{% for i in all | reverse %}{% for j in xs %}{% endfor %}{% endfor %}",
            "for loop over `xs` (10000 iterations) nested in loops of 10000 iterations",
        ),
        // Anything computed counts as the list budget.
        (
            "{% for a in xs %}{% for b in xs | json_encode | split(pat=\",\") %}{% endfor %}{% endfor %}",
            "for loop over `xs | json_encode | split` (1048576 iterations) nested in loops of 10000 iterations",
        ),
    ]
    .map(|(text, want)| (text, format!("{want} {budget}")));
    let cases: Vec<(&str, &str)> = cases.iter().map(|(t, w)| (*t, w.as_str())).collect();
    stopped_with(Engine::Tera, &data, &cases);
    // Within the budget: 10,000 × 3, and loops one after the other.
    let (result, _) = render_with(
        Engine::Tera,
        "{% for a in xs %}{% for b in l %}{% endfor %}{% endfor %}{% for a in xs %}{% endfor %}{% for i in items %}{% for p in l %}{% endfor %}{% endfor %}ok",
        data,
    );
    assert_eq!(result.expect("renders"), 2);
}

/// A chain of maps or lists nested thousands of levels deep (cheap to build in a loop) neither
/// overflows the render thread's stack when it is dropped nor when it is printed: lists are
/// refused past the depth limit as they are built, maps as they are expanded.
#[test]
fn deep_chains_are_dropped_and_refused_without_overflowing_the_stack() {
    stopped(
        Engine::Text,
        &[
            (
                "{{ $l := list }}{{ range until 3000 }}{{ $l = list $l }}{{ end }}{{ len $l }}",
                "error calling list: list nested more than 1000 levels deep exceeds the template depth limit",
            ),
            (
                "{{ $d := dict }}{{ range until 3000 }}{{ $d = dict \"a\" $d }}{{ end }}{{ toJson $d }}",
                "error calling toJson: value nested more than 1000 levels deep exceeds the template depth limit",
            ),
        ],
    );
    for text in [
        "{{ $d := dict }}{{ range until 100000 }}{{ $d = dict \"a\" $d }}{{ end }}{{ len $d }}",
        "{{ $d := dict }}{{ range until 50000 }}{{ $d = dict \"a\" (list $d) }}{{ end }}{{ len $d }}",
    ] {
        let (result, took) = render(Engine::Text, text);
        assert_eq!(result.expect(text), 1, "{text}");
        assert!(took < BOUND, "{text}: took {took:?}");
    }
}

/// Tera macros recurse without a limit (a macro calling itself overflowed the render thread's
/// stack and aborted the process): a macro that calls itself, directly or through another,
/// is refused; a macro's loops count as often as the loops around its call go round.
#[test]
fn tera_macros_that_recurse_or_loop_too_often_are_refused() {
    stopped(
        Engine::Tera,
        &[
            (
                "{% macro r(n) %}{{ self::r(n=n+1) }}{% endmacro r %}{{ self::r(n=0) }}",
                "macro `r` calls itself: Tera macros recurse without a limit",
            ),
            (
                "{% macro a(n) %}{% if n > 0 %}{{ self::b(n=n) }}{% endif %}{% endmacro a %}{% macro b(n) %}{% for i in l %}{{ self::a(n=n) }}{% endfor %}{% endmacro b %}{{ self::a(n=1) }}",
                "calls itself: Tera macros recurse without a limit",
            ),
        ],
    );
    let xs: Vec<u32> = (0..10_000).collect();
    let data = json!({"xs": xs, "l": [1, 2, 3]});
    stopped_with(
        Engine::Tera,
        &data,
        &[(
            "{% macro m() %}{% for b in xs %}{% endfor %}{% endmacro m %}{% for a in xs %}{{ self::m() }}{% endfor %}",
            "macro `m` (10000 iterations) called in loops of 10000 iterations exceeds the template budget of 10000000 iterations",
        )],
    );
    let (result, _) = render_with(
        Engine::Tera,
        "{% macro m(x) %}[{% for b in l %}{{ x }}{% endfor %}]{% endmacro m %}{% for a in l %}{{ self::m(x=a) }}{% endfor %}",
        data,
    );
    assert_eq!(result.expect("renders"), "[111][222][333]".len());
}

const BYTE_BUDGET: &str = "beyond the template budget of 67108864 bytes";

/// `big`, a string of 64 KiB; `list`, `n` numbers; `items`, `n` copies of `big`; `l`, three.
fn big_data(n: usize) -> serde_json::Value {
    let big = "x".repeat(64 << 10);
    json!({"list": vec![0; n], "items": vec![&big; n], "big": big, "l": [1, 2, 3]})
}

/// A `set_global` in a loop that appends a piece every iteration (`s ~ big`) grows by the
/// iterations times the piece: what the `set_global`s in loops append together is held to
/// 64 MiB (the Go engine's output limit) before the render, counted from the data's printed
/// sizes. The cases here are over the limit by arithmetic only (1,100 × 64 KiB is 68.75 MiB):
/// rendered, they would build that string, copying it quadratically.
#[test]
fn tera_variables_appended_in_loops_are_held_to_a_byte_budget() {
    let (data, budget) = (big_data, BYTE_BUDGET);
    let cases = [
        (
            "{% set_global s = \"\" %}{% for x in list %}{% set_global s = s ~ big %}{% endfor %}{{ s | length }}",
            format!("`set_global s` appending 65536 bytes in loops of 1100 iterations makes the variables set in loops grow by 72089600 bytes, {budget}"),
        ),
        // Through a loop's variable (each element in turn), a variable set to it, and a literal.
        (
            "{% set_global s = \"\" %}{% for x in items %}{% set u = x | upper %}{% set_global s = s ~ u ~ \",\" %}{% endfor %}{{ s | length }}",
            format!("`set_global s` appending 65537 bytes in loops of 1100 iterations makes the variables set in loops grow by 72090700 bytes, {budget}"),
        ),
        // Through a plain `set` in the loop, and nested loops.
        (
            "{% set_global s = \"\" %}{% for x in l %}{% for y in list %}{% set t = s ~ big %}{% set_global s = t %}{% endfor %}{% endfor %}{{ s | length }}",
            format!("`set_global s` appending 65536 bytes in loops of 3300 iterations makes the variables set in loops grow by 216268800 bytes, {budget}"),
        ),
        // A variable grown in one loop counts its growth when appended in another.
        (
            "{% set_global s = \"\" %}{% for x in l %}{% set_global s = s ~ big %}{% endfor %}{% set_global t = \"\" %}{% for x in list %}{% set_global t = t ~ s %}{% endfor %}{{ t | length }}",
            format!("`set_global t` appending 196608 bytes in loops of 1100 iterations makes the variables set in loops grow by 216465408 bytes, {budget}"),
        ),
        // In a macro, as often as the loops around its calls go round.
        (
            "{% macro m() %}{% set_global s = \"\" %}{% for x in l %}{% set_global s = s ~ big %}{% endfor %}{{ s | length }}{% endmacro m %}{% for x in list %}{{ self::m() }}{% endfor %}",
            format!("macro `m` appending 196608 bytes in loops of 1100 iterations makes the variables set in loops grow by 216268800 bytes, {budget}"),
        ),
    ];
    for (text, want) in &cases {
        stopped_with(Engine::Tera, &data(1100), &[(text, want)]);
    }
    // The same templates over ten elements render.
    for (text, _) in &cases[..4] {
        let (result, _) = render_with(Engine::Tera, text, data(10));
        assert!(result.expect(text) > 0, "{text}");
    }
}

/// A plain `set` in a loop that doubles a variable growing in the loop is no way around the
/// doubling check, nor is a filter that lengthens its input by a factor (20 rounds: at most a
/// few megabytes if they rendered). Filters that do not lengthen still render.
#[test]
fn tera_variables_doubled_through_a_plain_set_or_a_filter_are_refused() {
    let through = |filter: &str| {
        format!("`set_global s` in a loop passes variables set in the loop through `{filter}`, which may lengthen them by a factor every iteration")
    };
    let cases = [
        (
            "{% set_global s = \"x\" %}{% for i in range(end=20) %}{% set t = s ~ s %}{% set_global s = t %}{% endfor %}{{ s }}".to_string(),
            "`set_global s` in a loop uses variables set in the loop 2 times".to_string(),
        ),
        (
            "{% set_global s = \"x\" %}{% for i in range(end=20) %}{% set_global s = s | replace(from=\"x\", to=\"xx\") %}{% endfor %}{{ s }}".to_string(),
            through("replace"),
        ),
        (
            "{% set_global s = '\"' %}{% for i in range(end=12) %}{% set_global s = s | json_encode %}{% endfor %}{{ s }}".to_string(),
            through("json_encode"),
        ),
        // Through a filter's argument, and through a plain `set`.
        (
            "{% set_global s = \"x\" %}{% for i in range(end=20) %}{% set_global s = \"aa\" | replace(from=\"a\", to=s) %}{% endfor %}{{ s }}".to_string(),
            through("replace"),
        ),
        (
            "{% set_global s = \"&\" %}{% for i in range(end=20) %}{% set t = s | escape %}{% set_global s = t %}{% endfor %}{{ s }}".to_string(),
            through("escape"),
        ),
    ];
    let cases: Vec<(&str, &str)> = cases
        .iter()
        .map(|(t, w)| (t.as_str(), w.as_str()))
        .collect();
    stopped(Engine::Tera, &cases);
    for (text, want) in [
        (
            "{% set_global s = \"\" %}{% for i in l %}{% set_global s = s ~ i ~ \",\" | upper %}{% endfor %}{{ s }}",
            "1,2,3,",
        ),
        (
            "{% set_global n = [] %}{% for i in l %}{% set_global n = n | concat(with=i) %}{% endfor %}{{ n | join(sep=\"-\") }}",
            "1-2-3",
        ),
    ] {
        let options = Options {
            engine: Engine::Tera,
            ..Options::default()
        };
        let out = Template::parse(text, &options)
            .and_then(|t| t.render(&event_data(&json!({"l": [1, 2, 3]}))))
            .expect(text);
        assert_eq!(out, want, "{text}");
    }
}

/// Tera's output has no limit of its own: what a template prints in loops known before the
/// render (over data, list literals, literal ranges) is held to 64 MiB, counted from the data's
/// printed sizes and the text's length (1,100 × 64 KiB is 68.75 MiB: over by arithmetic, it
/// would render in well under a second). A loop over a computed list counts once.
#[test]
fn tera_output_in_loops_is_held_to_a_byte_budget() {
    let big = "x".repeat(64 << 10);
    let (data, budget) = (big_data, BYTE_BUDGET);
    let text_loop = format!("{{% for x in list %}}{big}{{% endfor %}}");
    let cases = [
        (
            "{% for x in list %}{{ big }}{% endfor %}".to_string(),
            format!("printing `big` (65536 bytes) in loops of 1100 iterations makes the output 72089600 bytes, {budget}"),
        ),
        (
            "{% for i in range(end=1100) %}{{ big | upper }}{% endfor %}".to_string(),
            format!("printing `big | upper` (65536 bytes) in loops of 1100 iterations makes the output 72089600 bytes, {budget}"),
        ),
        // Each element in turn; nested loops multiply.
        (
            "{% for a in l %}{% for x in items %}{{ x }}{% endfor %}{% endfor %}".to_string(),
            format!("printing `x` (65536 bytes) in loops of 3300 iterations makes the output 216268800 bytes, {budget}"),
        ),
        (
            text_loop.clone(),
            format!("printing the template's text (65536 bytes) in loops of 1100 iterations makes the output 72089600 bytes, {budget}"),
        ),
        (
            "{% macro m() %}{{ big }}{% endmacro m %}{% for x in list %}{{ self::m() }}{% endfor %}".to_string(),
            format!("printing macro `m` (65536 bytes) in loops of 1100 iterations makes the output 72089600 bytes, {budget}"),
        ),
    ];
    for (text, want) in &cases {
        stopped_with(Engine::Tera, &data(1100), &[(text, want)]);
    }
    // The same over ten elements render (but the literal range), as does a loop over a
    // computed list.
    for (text, _) in cases.iter().filter(|(t, _)| !t.contains("range")) {
        let (result, _) = render_with(Engine::Tera, text, data(10));
        assert!(result.expect(text) >= 10 * (64 << 10), "{text}");
    }
    let (result, _) = render_with(
        Engine::Tera,
        "{% for x in big | split(pat=\"\") %}{{ l | length }}{% endfor %}",
        data(1100),
    );
    assert_eq!(result.expect("a computed loop"), (64 << 10) + 2);
}
