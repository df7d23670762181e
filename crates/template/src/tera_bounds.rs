//! Bounds for Tera templates, which have no budget of their own: before Tera renders, the
//! parsed template is checked against the render's data (a pure stage). Refused are
//! - loops nested so that their iterations multiply past `MAX_ITERATIONS`: a `for` over a data
//!   path counts that list's (or map's) length, the largest one when the path goes through an
//!   outer loop's variable; over `range(...)` its literal bounds, at most `MAX_GENERATED` (what
//!   `range` may generate in a whole render); over anything else `MAX_GENERATED`;
//! - a `set_global` inside a loop whose value uses variables set (globally) in that loop more
//!   than once (`{% set_global s = s ~ s %}`): its value could double every iteration, and
//!   Tera's `~` and arithmetic have no hook that could stop it (a plain `set` in a loop starts
//!   again every iteration);
//! - a `set` whose value holds more than `MAX_COPIES` copies of values read from the data or
//!   the template, counting a variable as the copies it was set to (`{% set s = s ~ s %}`
//!   written 40 times over would be 2^40 copies).

use serde_json::Value as Json;
use tera::ast::{Expr, ExprVal, Node};

use crate::funcs::MAX_GENERATED;

/// Most loop iterations one render may make, all nestings multiplied (Go's step budget).
pub const MAX_ITERATIONS: u64 = 10_000_000;

/// Most copies of values read from the data or the template a variable may be set to.
pub const MAX_COPIES: u64 = 64;

/// Filters after which a list has at most the elements it had.
const SUBSETTING: &[&str] = &["slice", "filter", "sort", "reverse", "unique"];

/// Checks `ast` against the render's `data`; the refusal names the limit.
pub fn check(ast: &[Node], data: &Json) -> Result<(), String> {
    let mut walk = Walk {
        data,
        env: Vec::new(),
        growing: Vec::new(),
        copies: std::collections::HashMap::new(),
    };
    walk.nodes(ast, 1)
}

/// What a variable may hold.
#[derive(Clone)]
enum Binding<'d> {
    /// One of these data values.
    Values(Vec<&'d Json>),
    /// Anything (a computed value).
    Unknown,
}

struct Walk<'d> {
    data: &'d Json,
    /// Variables in scope, innermost last.
    env: Vec<(String, Binding<'d>)>,
    /// For each enclosing loop, the variables its body sets.
    growing: Vec<Vec<String>>,
    /// The copies each variable set so far holds, the most of any `set` of it.
    copies: std::collections::HashMap<String, u64>,
}

impl<'d> Walk<'d> {
    fn nodes(&mut self, nodes: &[Node], iterations: u64) -> Result<(), String> {
        for node in nodes {
            match node {
                Node::Forloop(_, f, _) => {
                    let (count, elements) = self.container(&f.container);
                    let mut inner = iterations.saturating_mul(count);
                    if is_range(&f.container) {
                        // `range` holds the elements it generates in a render to
                        // `MAX_GENERATED` together, so a loop over it goes round no more often.
                        inner = inner.min(MAX_GENERATED as u64);
                    } else if inner > MAX_ITERATIONS {
                        return Err(format!(
                            "for loop over {} ({count} iterations) nested in loops of {iterations} \
                             iterations exceeds the template budget of {MAX_ITERATIONS} iterations",
                            describe(&f.container)
                        ));
                    }
                    let mark = self.env.len();
                    if let Some(key) = &f.key {
                        self.env.push((key.clone(), Binding::Unknown));
                    }
                    self.env.push((f.value.clone(), elements));
                    let mut sets = Vec::new();
                    set_names(&f.body, &mut sets);
                    self.growing.push(sets);
                    self.nodes(&f.body, inner)?;
                    self.growing.pop();
                    self.env.truncate(mark);
                    if let Some(empty) = &f.empty_body {
                        self.nodes(empty, iterations)?;
                    }
                }
                Node::Set(_, set) => {
                    let growing: Vec<&String> = self.growing.iter().flatten().collect();
                    let (mut uses, mut copies) = (0usize, 0u64);
                    expr_idents(&set.value, &mut |ident| {
                        let name = root_name(ident);
                        if growing.iter().any(|g| *g == name) {
                            uses += 1;
                        }
                        let held = self.copies.get(name).copied().unwrap_or(1);
                        copies = copies.saturating_add(held);
                    });
                    if set.global && uses > 1 {
                        return Err(format!(
                            "`set_global {}` in a loop uses variables set in the loop {uses} \
                             times: its value could double every iteration, beyond the template \
                             budget",
                            set.key
                        ));
                    }
                    if copies > MAX_COPIES {
                        return Err(format!(
                            "`set {}` to {copies} copies of values exceeds the template budget \
                             of {MAX_COPIES} copies",
                            set.key
                        ));
                    }
                    let held = self.copies.entry(set.key.clone()).or_insert(1);
                    *held = (*held).max(copies);
                    let binding = self.binding(&set.value);
                    self.env.push((set.key.clone(), binding));
                }
                Node::If(branches, _) => {
                    for (_, _, body) in &branches.conditions {
                        self.nodes(body, iterations)?;
                    }
                    if let Some((_, body)) = &branches.otherwise {
                        self.nodes(body, iterations)?;
                    }
                }
                Node::FilterSection(_, section, _) => self.nodes(&section.body, iterations)?,
                Node::Block(_, block, _) => self.nodes(&block.body, iterations)?,
                Node::MacroDefinition(_, mac, _) => {
                    // Checked on its own, its arguments unknown.
                    let (env, growing) = (
                        std::mem::take(&mut self.env),
                        std::mem::take(&mut self.growing),
                    );
                    let result = self.nodes(&mac.body, 1);
                    (self.env, self.growing) = (env, growing);
                    result?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// What `expr` may hold, as a variable set to it.
    fn binding(&self, expr: &Expr) -> Binding<'d> {
        if expr.negated
            || !expr
                .filters
                .iter()
                .all(|f| SUBSETTING.contains(&f.name.as_str()))
        {
            return Binding::Unknown;
        }
        match &expr.val {
            ExprVal::Ident(path) => self.resolve(path),
            _ => Binding::Unknown,
        }
    }

    /// The iterations of a loop over `expr`, and what its variable holds.
    fn container(&self, expr: &Expr) -> (u64, Binding<'d>) {
        let unknown = (MAX_GENERATED as u64, Binding::Unknown);
        if !expr
            .filters
            .iter()
            .all(|f| SUBSETTING.contains(&f.name.as_str()))
        {
            return unknown;
        }
        match &expr.val {
            ExprVal::Ident(_) => match self.binding(expr) {
                Binding::Values(values) => {
                    let count = values.iter().map(|v| length(v)).max().unwrap_or(0);
                    let elements = values
                        .iter()
                        .flat_map(|v| -> Box<dyn Iterator<Item = &'d Json>> {
                            match v {
                                Json::Array(items) => Box::new(items.iter()),
                                Json::Object(entries) => Box::new(entries.values()),
                                _ => Box::new(std::iter::empty()),
                            }
                        })
                        .collect();
                    (count, Binding::Values(elements))
                }
                Binding::Unknown => unknown,
            },
            ExprVal::FunctionCall(call) if call.name == "range" => {
                let literal = |name: &str, default: i64| match call.args.get(name) {
                    None => Some(default),
                    Some(Expr {
                        val: ExprVal::Int(n),
                        negated: false,
                        filters,
                    }) if filters.is_empty() => Some(*n),
                    Some(_) => None,
                };
                match (
                    literal("start", 0),
                    literal("end", i64::MIN),
                    literal("step_by", 1),
                ) {
                    (Some(start), Some(end), Some(step)) if end != i64::MIN && step > 0 => {
                        let span = end.saturating_sub(start).max(0) as u64;
                        (span.div_ceil(step as u64), Binding::Unknown)
                    }
                    _ => unknown,
                }
            }
            ExprVal::Array(items) => (items.len() as u64, Binding::Unknown),
            _ => unknown,
        }
    }

    /// The data values a dotted path may name: through a variable in scope or the data.
    fn resolve(&self, path: &str) -> Binding<'d> {
        if path.contains('[') {
            return Binding::Unknown;
        }
        let mut segments = path.split('.');
        let first = segments.next().unwrap_or_default();
        let mut values = match self.env.iter().rev().find(|(name, _)| name == first) {
            Some((_, Binding::Values(values))) => values.clone(),
            Some((_, Binding::Unknown)) => return Binding::Unknown,
            None => self.data.get(first).into_iter().collect(),
        };
        for segment in segments {
            values = values
                .into_iter()
                .filter_map(|v| match v {
                    Json::Object(entries) => entries.get(segment),
                    Json::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
                    _ => None,
                })
                .collect();
        }
        Binding::Values(values)
    }
}

/// How many times a loop over `value` goes round.
fn length(value: &Json) -> u64 {
    match value {
        Json::Array(items) => items.len() as u64,
        Json::Object(entries) => entries.len() as u64,
        Json::String(s) => s.len() as u64,
        _ => 0,
    }
}

fn is_range(expr: &Expr) -> bool {
    matches!(&expr.val, ExprVal::FunctionCall(call) if call.name == "range")
        && expr.filters.is_empty()
}

fn describe(expr: &Expr) -> String {
    let mut text = match &expr.val {
        ExprVal::Ident(path) => path.clone(),
        ExprVal::FunctionCall(call) => format!("{}(...)", call.name),
        _ => "an expression".to_string(),
    };
    for filter in &expr.filters {
        text.push_str(" | ");
        text.push_str(&filter.name);
    }
    format!("`{text}`")
}

/// The variable a path starts with.
fn root_name(ident: &str) -> &str {
    ident.split(['.', '[']).next().unwrap_or_default()
}

/// The names `nodes` set globally (what outlives a loop's iteration), at any depth.
fn set_names(nodes: &[Node], out: &mut Vec<String>) {
    for node in nodes {
        match node {
            Node::Set(_, set) if set.global => out.push(set.key.clone()),
            Node::Forloop(_, f, _) => {
                set_names(&f.body, out);
                if let Some(empty) = &f.empty_body {
                    set_names(empty, out);
                }
            }
            Node::If(branches, _) => {
                for (_, _, body) in &branches.conditions {
                    set_names(body, out);
                }
                if let Some((_, body)) = &branches.otherwise {
                    set_names(body, out);
                }
            }
            Node::FilterSection(_, section, _) => set_names(&section.body, out),
            Node::Block(_, block, _) => set_names(&block.body, out),
            _ => {}
        }
    }
}

/// Calls `f` with every variable path `expr` reads, each time it is read.
fn expr_idents(expr: &Expr, f: &mut dyn FnMut(&str)) {
    val_idents(&expr.val, f);
    for filter in &expr.filters {
        for arg in filter.args.values() {
            expr_idents(arg, f);
        }
    }
}

fn val_idents(val: &ExprVal, f: &mut dyn FnMut(&str)) {
    match val {
        ExprVal::Ident(path) => f(path),
        ExprVal::Math(m) => {
            expr_idents(&m.lhs, f);
            expr_idents(&m.rhs, f);
        }
        ExprVal::Logic(l) => {
            expr_idents(&l.lhs, f);
            expr_idents(&l.rhs, f);
        }
        ExprVal::In(i) => {
            expr_idents(&i.lhs, f);
            expr_idents(&i.rhs, f);
        }
        ExprVal::Test(t) => {
            f(&t.ident);
            for arg in &t.args {
                expr_idents(arg, f);
            }
        }
        ExprVal::MacroCall(call) => {
            for arg in call.args.values() {
                expr_idents(arg, f);
            }
        }
        ExprVal::FunctionCall(call) => {
            for arg in call.args.values() {
                expr_idents(arg, f);
            }
        }
        ExprVal::Array(items) => {
            for item in items {
                expr_idents(item, f);
            }
        }
        ExprVal::StringConcat(concat) => {
            for value in &concat.values {
                val_idents(value, f);
            }
        }
        ExprVal::String(_) | ExprVal::Int(_) | ExprVal::Float(_) | ExprVal::Bool(_) => {}
    }
}
