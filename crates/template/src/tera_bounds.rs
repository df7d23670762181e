//! Bounds for Tera templates, which have no budget of their own: before Tera renders, the
//! parsed template is checked against the render's data (a pure stage). Refused are
//! - loops nested so that their iterations multiply past `MAX_ITERATIONS`: a `for` over a data
//!   path counts that list's (or map's) length, the largest one when the path goes through an
//!   outer loop's variable; over `range(...)` its literal bounds, at most `MAX_GENERATED` (what
//!   `range` may generate in a whole render); over anything else `MAX_GENERATED`;
//! - a `set_global` inside a loop whose value uses variables set (globally) in that loop more
//!   than once (`{% set_global s = s ~ s %}`): its value could double every iteration, and
//!   Tera's `~` and arithmetic have no hook that could stop it (a plain `set` in a loop starts
//!   again every iteration, and counts as the variables it reads: `{% set t = s ~ s %}
//!   {% set_global s = t %}` doubles too);
//! - `set_global`s inside loops that append more than `MAX_BYTES` together: each appends, every
//!   iteration, the printed size of what its value reads besides the growing variable (data
//!   read through a loop's variable counts the mean size of what it names, so a loop over a
//!   list appends that list's size; a variable counts what it was set to, grown ones included;
//!   literals their length), times the iterations of the loops around it;
//! - a `set` whose value holds more than `MAX_COPIES` copies of values read from the data or
//!   the template, counting a variable as the copies it was set to (`{% set s = s ~ s %}`
//!   written 40 times over would be 2^40 copies);
//! - output past `MAX_BYTES`: what each `{{ ... }}` reads (as above) and each piece of text,
//!   times the iterations of the loops around it that are known before the render (over data,
//!   a list literal or a `range` of literal bounds; a loop over a computed list counts once);
//! - a macro that calls itself (Tera would recurse until the stack overflows); a macro's loops
//!   count as often as the loops around its call go round.

use std::collections::HashMap;

use serde_json::Value as Json;
use tera::ast::{Expr, ExprVal, Node};

use crate::funcs::MAX_GENERATED;

/// Most loop iterations one render may make, all nestings multiplied (Go's step budget).
pub const MAX_ITERATIONS: u64 = 10_000_000;

/// Most copies of values read from the data or the template a variable may be set to.
pub const MAX_COPIES: u64 = 64;

/// Most bytes the `set_global`s in loops of one render may append together, and most bytes it
/// may print: the Go engine's output limit (64 MiB), since what a template builds is there to
/// be printed, and Tera's output has no limit of its own.
pub const MAX_BYTES: u64 = 64 << 20;

/// Filters after which a list has at most the elements it had.
const SUBSETTING: &[&str] = &["slice", "filter", "sort", "reverse", "unique"];

/// Filters whose result is no longer than their input plus their arguments: a variable growing
/// in a loop may pass through these (`names | concat(with=x)`), not through one that may
/// lengthen it by a factor every iteration (`replace(from="x", to="xx")`, `json_encode`,
/// `escape`).
const NOT_LENGTHENING: &[&str] = &[
    "lower",
    "upper",
    "capitalize",
    "title",
    "trim",
    "trim_start",
    "trim_end",
    "trim_start_matches",
    "trim_end_matches",
    "truncate",
    "striptags",
    "wordcount",
    "length",
    "first",
    "last",
    "nth",
    "slice",
    "filter",
    "sort",
    "reverse",
    "unique",
    "map",
    "get",
    "concat",
    "default",
    "safe",
    "round",
    "abs",
    "int",
    "float",
];

/// Checks `ast` against the render's `data`; the refusal names the limit.
pub fn check(ast: &[Node], data: &Json) -> Result<(), String> {
    let macros = ast
        .iter()
        .filter_map(|node| match node {
            Node::MacroDefinition(_, mac, _) => Some((mac.name.as_str(), mac.body.as_slice())),
            _ => None,
        })
        .collect();
    let mut walk = Walk {
        data,
        env: Vec::new(),
        growing: Vec::new(),
        copies: HashMap::new(),
        macros,
        products: HashMap::new(),
        calling: Vec::new(),
        bytes: HashMap::new(),
        derived: HashMap::new(),
        appended: 0,
        printed: HashMap::new(),
        known: 1,
        output: 0,
    };
    walk.nodes(ast, 1).map(|_| ())
}

/// A variable a plain `set` in a loop set from variables growing in the loop.
#[derive(Clone)]
struct Derived {
    /// How often it read those.
    uses: u64,
    /// The bytes of what else it read.
    piece: u64,
    /// A filter it passed them through that may lengthen them by a factor.
    lengthening: Option<String>,
}

/// What a variable may hold.
#[derive(Clone)]
enum Binding<'d> {
    /// One of these data values.
    Values(Vec<&'d Json>),
    /// Anything (a computed value).
    Unknown,
}

struct Walk<'a, 'd> {
    data: &'d Json,
    /// Variables in scope, innermost last.
    env: Vec<(String, Binding<'d>)>,
    /// For each enclosing loop, the variables its body sets.
    growing: Vec<Vec<String>>,
    /// The copies each variable set so far holds, the most of any `set` of it.
    copies: HashMap<String, u64>,
    /// The template's macros (`self::name(...)`), by name.
    macros: HashMap<&'a str, &'a [Node]>,
    /// The iterations one call of each macro checked so far makes, the bytes its
    /// `set_global`s in loops append and the bytes it prints.
    products: HashMap<&'a str, (u64, u64, u64)>,
    /// The macros being checked, callers first.
    calling: Vec<&'a str>,
    /// The bytes each variable set so far may hold, the most of any `set` of it.
    bytes: HashMap<String, u64>,
    /// Variables a plain `set` in the current loops set from variables growing in them.
    derived: HashMap<String, Derived>,
    /// The bytes `set_global`s in loops append over the render, all together.
    appended: u64,
    /// The printed size of each data value measured, by address.
    printed: HashMap<usize, u64>,
    /// The iterations of the loops around the node being checked that are known before the
    /// render (a loop over a computed list counts once).
    known: u64,
    /// The bytes the render may print, all together.
    output: u64,
}

impl<'a, 'd> Walk<'a, 'd> {
    /// Checks `nodes`, run `iterations` times; the most iterations any loop in them makes.
    fn nodes(&mut self, nodes: &'a [Node], iterations: u64) -> Result<u64, String> {
        let mut reached = iterations;
        for node in nodes {
            for expr in node_exprs(node) {
                let mut called = Vec::new();
                visit(expr, &mut |val| {
                    if let ExprVal::MacroCall(call) = val {
                        if call.namespace == "self" {
                            called.push(call.name.as_str());
                        }
                    }
                });
                for name in called {
                    let (product, appends, prints) = self.macro_product(name)?;
                    self.append(&format!("macro `{name}`"), iterations, appends)?;
                    self.print(&format!("macro `{name}`"), prints)?;
                    let total = iterations.saturating_mul(product);
                    if total > MAX_ITERATIONS {
                        return Err(format!(
                            "macro `{name}` ({product} iterations) called in loops of \
                             {iterations} iterations exceeds the template budget of \
                             {MAX_ITERATIONS} iterations"
                        ));
                    }
                    reached = reached.max(total);
                }
            }
            match node {
                Node::Forloop(_, f, _) => {
                    let (known, elements) = self.container(&f.container);
                    let count = known.unwrap_or(MAX_GENERATED as u64);
                    let mut inner = iterations.saturating_mul(count);
                    let mut known_inner = self.known.saturating_mul(known.unwrap_or(1));
                    if is_range(&f.container) {
                        // `range` holds the elements it generates in a render to
                        // `MAX_GENERATED` together, so a loop over it goes round no more often.
                        inner = inner.min(MAX_GENERATED as u64);
                        known_inner = known_inner.min(MAX_GENERATED as u64);
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
                    if let Binding::Unknown = elements {
                        // The elements of a computed list share what the list reads.
                        let read = self.expr_bytes(&f.container);
                        self.set_bytes(&f.value, read.div_ceil(count.max(1)));
                    }
                    self.env.push((f.value.clone(), elements));
                    let mut sets = Vec::new();
                    set_names(&f.body, &mut sets);
                    self.growing.push(sets);
                    let (derived, known) = (self.derived.clone(), self.known);
                    self.known = known_inner;
                    let body = self.nodes(&f.body, inner);
                    (self.derived, self.known) = (derived, known);
                    reached = reached.max(body?);
                    self.growing.pop();
                    self.env.truncate(mark);
                    if let Some(empty) = &f.empty_body {
                        reached = reached.max(self.nodes(empty, iterations)?);
                    }
                }
                Node::Set(_, set) => self.set(set, iterations)?,
                Node::VariableBlock(_, expr) => {
                    let bytes = self.expr_bytes(expr);
                    self.print(&describe(expr), bytes)?;
                }
                Node::Text(text) => self.print("the template's text", text.len() as u64)?,
                Node::If(branches, _) => {
                    for (_, _, body) in &branches.conditions {
                        reached = reached.max(self.nodes(body, iterations)?);
                    }
                    if let Some((_, body)) = &branches.otherwise {
                        reached = reached.max(self.nodes(body, iterations)?);
                    }
                }
                Node::FilterSection(_, section, _) => {
                    reached = reached.max(self.nodes(&section.body, iterations)?);
                }
                Node::Block(_, block, _) => {
                    reached = reached.max(self.nodes(&block.body, iterations)?);
                }
                // A macro is checked where it is called.
                _ => {}
            }
        }
        Ok(reached)
    }

    /// The iterations one call of macro `name` makes, its arguments unknown; a macro that
    /// calls itself is refused (Tera recurses until the thread's stack overflows).
    fn macro_product(&mut self, name: &'a str) -> Result<(u64, u64, u64), String> {
        if let Some(product) = self.products.get(name) {
            return Ok(*product);
        }
        if self.calling.contains(&name) {
            return Err(format!(
                "macro `{name}` calls itself: Tera macros recurse without a limit"
            ));
        }
        // An unknown macro is Tera's error to report.
        let Some(body) = self.macros.get(name).copied() else {
            return Ok((1, 0, 0));
        };
        self.calling.push(name);
        let (env, growing, derived, appended, output, known) = (
            std::mem::take(&mut self.env),
            std::mem::take(&mut self.growing),
            std::mem::take(&mut self.derived),
            std::mem::take(&mut self.appended),
            std::mem::take(&mut self.output),
            std::mem::replace(&mut self.known, 1),
        );
        let product = self.nodes(body, 1);
        let appends = std::mem::replace(&mut self.appended, appended);
        let prints = std::mem::replace(&mut self.output, output);
        (self.env, self.growing, self.derived, self.known) = (env, growing, derived, known);
        self.calling.pop();
        let product = (product?, appends, prints);
        self.products.insert(name, product);
        Ok(product)
    }

    /// Checks a `set` run `iterations` times: whether its value could double, hold too many
    /// copies, or (a `set_global` in a loop) append too many bytes.
    fn set(&mut self, set: &tera::ast::Set, iterations: u64) -> Result<(), String> {
        let mut idents = Vec::new();
        expr_idents(&set.value, &mut |ident| idents.push(ident.to_string()));
        // `uses`: reads of variables growing in the enclosing loops; `piece`: the bytes of
        // everything else the value reads.
        let (mut uses, mut copies, mut piece) = (0u64, 0u64, literal_bytes(&set.value));
        let growing = |name: &str| {
            self.derived.contains_key(name) || self.growing.iter().flatten().any(|g| g == name)
        };
        let mut lengthening = lengthening_filter(&set.value, &growing).map(str::to_string);
        for ident in &idents {
            let name = root_name(ident);
            if let Some(derived) = self.derived.get(name) {
                uses = uses.saturating_add(derived.uses);
                piece = piece.saturating_add(derived.piece);
                lengthening = lengthening.or_else(|| derived.lengthening.clone());
            } else if self.growing.iter().flatten().any(|g| g == name) {
                uses += 1;
            } else {
                piece = piece.saturating_add(self.ident_bytes(ident));
            }
            let held = self.copies.get(name).copied().unwrap_or(1);
            copies = copies.saturating_add(held);
        }
        if set.global && uses > 1 {
            return Err(format!(
                "`set_global {}` in a loop uses variables set in the loop {uses} \
                 times: its value could double every iteration, beyond the template \
                 budget",
                set.key
            ));
        }
        if let (true, Some(filter)) = (set.global && uses > 0, &lengthening) {
            return Err(format!(
                "`set_global {}` in a loop passes variables set in the loop through `{filter}`, \
                 which may lengthen them by a factor every iteration, beyond the template budget",
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
        if set.global {
            self.derived.remove(&set.key);
            if uses == 1 {
                // Appends `piece` to what the variable held, every iteration.
                let before = self.bytes.get(&set.key).copied().unwrap_or(0);
                let growth =
                    self.append(&format!("`set_global {}`", set.key), iterations, piece)?;
                self.bytes
                    .insert(set.key.clone(), before.saturating_add(growth));
            } else {
                self.set_bytes(&set.key, piece);
            }
        } else if uses > 0 {
            let derived = Derived {
                uses,
                piece,
                lengthening,
            };
            self.derived.insert(set.key.clone(), derived);
        } else {
            self.derived.remove(&set.key);
            self.set_bytes(&set.key, piece);
        }
        let binding = self.binding(&set.value);
        self.env.push((set.key.clone(), binding));
        Ok(())
    }

    /// Counts `what` (a `set_global` or a macro) appending `piece` bytes in loops of
    /// `iterations`; the bytes it appends.
    fn append(&mut self, what: &str, iterations: u64, piece: u64) -> Result<u64, String> {
        let growth = iterations.saturating_mul(piece);
        self.appended = self.appended.saturating_add(growth);
        if self.appended > MAX_BYTES {
            return Err(format!(
                "{what} appending {piece} bytes in loops of {iterations} \
                 iterations makes the variables set in loops grow by {} bytes, beyond the \
                 template budget of {MAX_BYTES} bytes",
                self.appended
            ));
        }
        Ok(growth)
    }

    /// Counts `what` printing `bytes` in the known loops around it.
    fn print(&mut self, what: &str, bytes: u64) -> Result<(), String> {
        let total = bytes.saturating_mul(self.known);
        self.output = self.output.saturating_add(total);
        if self.output > MAX_BYTES {
            return Err(format!(
                "printing {what} ({bytes} bytes) in loops of {} iterations makes the output \
                 {} bytes, beyond the template budget of {MAX_BYTES} bytes",
                self.known, self.output
            ));
        }
        Ok(())
    }

    fn set_bytes(&mut self, name: &str, bytes: u64) {
        let held = self.bytes.entry(name.to_string()).or_insert(0);
        *held = (*held).max(bytes);
    }

    /// The bytes `expr` reads from the data, variables and literals.
    fn expr_bytes(&mut self, expr: &Expr) -> u64 {
        let mut idents = Vec::new();
        expr_idents(expr, &mut |ident| idents.push(ident.to_string()));
        idents.iter().fold(literal_bytes(expr), |sum, ident| {
            sum.saturating_add(self.ident_bytes(ident))
        })
    }

    /// The printed size of what the path `ident` names: the mean of the data values it may
    /// name (a loop's variable names each element in turn), or what its variable was set to.
    fn ident_bytes(&mut self, ident: &str) -> u64 {
        let set = self.bytes.get(root_name(ident)).copied().unwrap_or(0);
        let read = match self.resolve(ident) {
            Binding::Values(values) if !values.is_empty() => {
                let total = values
                    .iter()
                    .fold(0u64, |sum, v| sum.saturating_add(self.printed_size(v)));
                total.div_ceil(values.len() as u64)
            }
            _ => 0,
        };
        set.max(read)
    }

    fn printed_size(&mut self, value: &Json) -> u64 {
        let key = value as *const Json as usize;
        if let Some(size) = self.printed.get(&key) {
            return *size;
        }
        let size = match value {
            Json::String(s) => s.len() as u64,
            other => {
                let mut counter = Counter(0);
                // Writing to a counter cannot fail.
                let _ = serde_json::to_writer(&mut counter, other);
                counter.0
            }
        };
        self.printed.insert(key, size);
        size
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

    /// The iterations of a loop over `expr` (`None`: not known before the render), and what its
    /// variable holds.
    fn container(&self, expr: &Expr) -> (Option<u64>, Binding<'d>) {
        let unknown = (None, Binding::Unknown);
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
                    (Some(count), Binding::Values(elements))
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
                        (Some(span.div_ceil(step as u64)), Binding::Unknown)
                    }
                    _ => unknown,
                }
            }
            ExprVal::Array(items) => (Some(items.len() as u64), Binding::Unknown),
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

/// Counts the bytes written to it.
struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len() as u64);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The printed size of the literals in `expr`.
fn literal_bytes(expr: &Expr) -> u64 {
    let mut bytes = 0u64;
    visit(expr, &mut |val| {
        let len = match val {
            ExprVal::String(s) => s.len(),
            ExprVal::Int(n) => n.to_string().len(),
            ExprVal::Float(x) => x.to_string().len(),
            _ => 0,
        };
        bytes = bytes.saturating_add(len as u64);
    });
    bytes
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

/// The first filter in `expr` that is applied to a value reading a variable `growing` names
/// (in the value or the filter's arguments) and may lengthen it by a factor.
fn lengthening_filter<'e>(expr: &'e Expr, growing: &dyn Fn(&str) -> bool) -> Option<&'e str> {
    if let Some(filter) = expr
        .filters
        .iter()
        .find(|f| !NOT_LENGTHENING.contains(&f.name.as_str()))
    {
        let mut reads = false;
        expr_idents(expr, &mut |ident| reads |= growing(root_name(ident)));
        if reads {
            return Some(filter.name.as_str());
        }
    }
    let inner = expr.filters.iter().flat_map(|f| f.args.values());
    let inner: Vec<&Expr> = match &expr.val {
        ExprVal::Math(m) => vec![&*m.lhs, &*m.rhs],
        ExprVal::Logic(l) => vec![&*l.lhs, &*l.rhs],
        ExprVal::In(i) => vec![&*i.lhs, &*i.rhs],
        ExprVal::Test(t) => t.args.iter().collect(),
        ExprVal::MacroCall(call) => call.args.values().collect(),
        ExprVal::FunctionCall(call) => call.args.values().collect(),
        ExprVal::Array(items) => items.iter().collect(),
        _ => Vec::new(),
    }
    .into_iter()
    .chain(inner)
    .collect();
    inner
        .into_iter()
        .find_map(|e| lengthening_filter(e, growing))
}

/// Calls `f` with every variable path `expr` reads, each time it is read.
fn expr_idents(expr: &Expr, f: &mut dyn FnMut(&str)) {
    visit(expr, &mut |val| match val {
        ExprVal::Ident(path) => f(path),
        ExprVal::Test(test) => f(&test.ident),
        _ => {}
    });
}

/// Calls `f` with every value of `expr`, the expression's own and every one inside it.
fn visit<'e>(expr: &'e Expr, f: &mut dyn FnMut(&'e ExprVal)) {
    visit_val(&expr.val, f);
    for filter in &expr.filters {
        for arg in filter.args.values() {
            visit(arg, f);
        }
    }
}

fn visit_val<'e>(val: &'e ExprVal, f: &mut dyn FnMut(&'e ExprVal)) {
    f(val);
    match val {
        ExprVal::Math(m) => {
            visit(&m.lhs, f);
            visit(&m.rhs, f);
        }
        ExprVal::Logic(l) => {
            visit(&l.lhs, f);
            visit(&l.rhs, f);
        }
        ExprVal::In(i) => {
            visit(&i.lhs, f);
            visit(&i.rhs, f);
        }
        ExprVal::Test(t) => {
            for arg in &t.args {
                visit(arg, f);
            }
        }
        ExprVal::MacroCall(call) => {
            for arg in call.args.values() {
                visit(arg, f);
            }
        }
        ExprVal::FunctionCall(call) => {
            for arg in call.args.values() {
                visit(arg, f);
            }
        }
        ExprVal::Array(items) => {
            for item in items {
                visit(item, f);
            }
        }
        ExprVal::StringConcat(concat) => {
            for value in &concat.values {
                visit_val(value, f);
            }
        }
        ExprVal::Ident(_)
        | ExprVal::String(_)
        | ExprVal::Int(_)
        | ExprVal::Float(_)
        | ExprVal::Bool(_) => {}
    }
}

/// The expressions a node evaluates itself (not those of the nodes inside it).
fn node_exprs(node: &Node) -> Vec<&Expr> {
    match node {
        Node::VariableBlock(_, expr) => vec![expr],
        Node::Set(_, set) => vec![&set.value],
        Node::Forloop(_, f, _) => vec![&f.container],
        Node::If(branches, _) => branches.conditions.iter().map(|(_, e, _)| e).collect(),
        Node::FilterSection(_, section, _) => section.filter.args.values().collect(),
        _ => Vec::new(),
    }
}
