//! Go text/template compatible engine with sprig and the Sveltos functions, and Tera as a second
//! syntax. Templates are parsed once and rendered many times; rendering reads neither the
//! environment nor the file system.

mod ast;
mod builtins;
mod cache;
mod cond;
pub mod doc;
mod exec;
mod funcs;
mod gofmt;
mod gojson;
mod lex;
mod methods;
pub mod oracle;
mod parse;
mod printf;
mod sprig;
mod sveltos;
mod tera_bounds;
mod tera_engine;
mod val;
mod value;
mod yaml;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub use cache::TemplateCache;
pub use doc::{Doc, DocMap};
pub use value::{event_data, event_data_shared, Map, MapReadGuard, MapRef, MapWriteGuard, Value};

/// The template syntax and escaping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Engine {
    /// Go `text/template` (event-manager).
    #[default]
    Text,
    /// Go `html/template` escaping of action output (libsveltos, `eventSourceName`).
    Html,
    /// Tera (Jinja2-like) syntax with the same data and the Sveltos functions.
    Tera,
}

/// What a missing map key yields (Go's `missingkey` option).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MissingKey {
    /// An execution error (event-manager's setting).
    #[default]
    Error,
    /// Go's "invalid" value, printed `<no value>`.
    Default,
    /// The zero value of the map's element type (`nil` for `interface{}`).
    Zero,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Options {
    pub engine: Engine,
    pub missing_key: MissingKey,
    /// The template name used in error messages and by `{{ template "name" }}`.
    pub name: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            engine: Engine::Text,
            missing_key: MissingKey::Error,
            name: "sluice".into(),
        }
    }
}

/// Whether an error happened while parsing or while rendering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Parse,
    Exec,
}

/// A template failure with its position. Both kinds are permanent for the message that
/// triggered them: retrying the same template over the same data fails the same way.
#[derive(Clone, Debug, thiserror::Error)]
#[error("template: {name}:{line}:{column}: {context}{message}")]
pub struct Error {
    kind: ErrorKind,
    name: String,
    line: usize,
    column: usize,
    context: String,
    message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    fn at(
        kind: ErrorKind,
        name: &str,
        src: &str,
        pos: usize,
        context: String,
        message: String,
    ) -> Error {
        let pos = pos.min(src.len());
        let before = src.get(..pos).unwrap_or(src);
        let line = 1 + before.matches('\n').count();
        // Go counts the column in bytes from the start of the line, from zero.
        let column = before.rfind('\n').map(|i| pos - i - 1).unwrap_or(pos);
        Error {
            kind,
            name: name.to_string(),
            line,
            column,
            context,
            message,
        }
    }

    pub(crate) fn parse(name: &str, src: &str, pos: usize, message: String) -> Error {
        Error::at(ErrorKind::Parse, name, src, pos, String::new(), message)
    }

    pub(crate) fn exec(name: &str, src: &str, span: ast::Span, message: String) -> Error {
        let text = src
            .get(span.start as usize..span.end as usize)
            .unwrap_or_default()
            .trim();
        let context = format!("executing {name:?} at <{text}>: ");
        Error::at(
            ErrorKind::Exec,
            name,
            src,
            span.start as usize,
            context,
            message,
        )
    }

    pub(crate) fn tera(name: &str, kind: ErrorKind, message: String) -> Error {
        Error {
            kind,
            name: name.to_string(),
            line: 0,
            column: 0,
            context: String::new(),
            message,
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// 1-based line of the failing node (0 when the engine reports no position).
    pub fn line(&self) -> usize {
        self.line
    }

    /// 0-based byte column in that line, as Go reports it.
    pub fn column(&self) -> usize {
        self.column
    }

    /// What went wrong, without the position prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// A parsed template, ready to render any number of times from any thread.
#[derive(Debug)]
pub struct Template {
    inner: Inner,
    options: Options,
    /// The longest output rendered so far: the next output buffer starts that large instead of
    /// growing (and copying) its way there. Written only when it grows, so threads rendering the
    /// same template do not fight over the cache line.
    longest: AtomicUsize,
}

#[derive(Debug)]
enum Inner {
    Go {
        src: Arc<str>,
        tree: ast::Tree,
        /// The template named in the options, looked up once.
        main: Option<Arc<Vec<ast::Node>>>,
    },
    Tera(Box<tera_engine::TeraTemplate>),
}

impl Template {
    /// Parses `text`; parse-time errors (syntax, undefined functions or variables) fail here.
    pub fn parse(text: &str, options: &Options) -> Result<Template> {
        let inner = match options.engine {
            Engine::Text | Engine::Html => {
                let tree = parse::parse(text, &options.name, options.engine)
                    .map_err(|e| Error::parse(&options.name, text, e.pos, e.message))?;
                Inner::Go {
                    src: Arc::from(text),
                    main: tree.templates.get(options.name.as_str()).cloned(),
                    tree,
                }
            }
            Engine::Tera => Inner::Tera(Box::new(tera_engine::TeraTemplate::parse(
                text,
                &options.name,
            )?)),
        };
        Ok(Template {
            inner,
            options: options.clone(),
            longest: AtomicUsize::new(0),
        })
    }

    /// Renders with `data` as dot. The output of a failed render is discarded, as Sveltos does.
    pub fn render(&self, data: &Value) -> Result<String> {
        let mut out = String::with_capacity(self.output_hint());
        self.render_into(data, &mut out)?;
        self.note_length(out.len());
        Ok(out)
    }

    /// Renders into `out` (appending); on error `out` holds partial output.
    pub fn render_into(&self, data: &Value, out: &mut String) -> Result<()> {
        match &self.inner {
            Inner::Go { src, tree, main } => {
                // A template that cannot modify maps reads untouched shared JSON in place;
                // one that can gets the lazily converted maps that Go's sharing needs.
                let pristine = match data {
                    Value::Map(m) if !tree.mutates => m.pristine_json(),
                    _ => None,
                };
                match &pristine {
                    Some((json, event)) => {
                        let shape = if *event {
                            val::Shape::EventRoot
                        } else {
                            val::Shape::Plain
                        };
                        let dot = val::Val::J(json.get(), shape);
                        self.run_go(src, tree, main, dot, val::Root(Some(json.clone())), out)
                    }
                    None => self.run_go(
                        src,
                        tree,
                        main,
                        val::Val::V(data.clone()),
                        val::Root(None),
                        out,
                    ),
                }
            }
            Inner::Tera(t) => {
                out.push_str(&t.render(data)?);
                Ok(())
            }
        }
    }

    /// Renders event data given as decoded JSON, with the types [`event_data`] gives it
    /// (spec §6.8). A template that cannot modify maps reads `json` in place and converts only
    /// the parts it passes to functions: the cheapest way to render one event's data.
    pub fn render_event(&self, json: &Doc) -> Result<String> {
        let mut out = String::with_capacity(self.output_hint());
        self.render_event_into(json, &mut out)?;
        self.note_length(out.len());
        Ok(out)
    }

    /// [`Template::render_event`] appending to `out`; on error `out` holds partial output.
    pub fn render_event_into(&self, json: &Doc, out: &mut String) -> Result<()> {
        match &self.inner {
            Inner::Go { src, tree, main } if !tree.mutates && json.is_object() => {
                let dot = val::Val::J(json, val::Shape::EventRoot);
                self.run_go(src, tree, main, dot, val::Root(None), out)
            }
            _ => self.render_into(&value::doc_event_data(json), out),
        }
    }

    fn run_go<'a>(
        &'a self,
        src: &'a str,
        tree: &'a ast::Tree,
        main: &'a Option<Arc<Vec<ast::Node>>>,
        dot: val::Val<'a>,
        root: val::Root,
        out: &'a mut String,
    ) -> Result<()> {
        let name = self.options.name.as_str();
        let Some(main) = main else {
            return Err(Error::parse(name, src, 0, format!("no template {name:?}")));
        };
        let mut exec = exec::Exec::new(
            tree,
            src,
            name,
            self.options.engine,
            self.options.missing_key,
            std::mem::take(out),
            root,
        );
        let result = exec.run(main, dot).map_err(|e| *e);
        *out = exec.out;
        result
    }

    /// A first guess of the output size: the longest output so far, or one and a half times
    /// the template's own length before the first render.
    fn output_hint(&self) -> usize {
        // Capped: one huge output should not make every later render reserve as much.
        let seen = self.longest.load(Ordering::Relaxed).min(1 << 20);
        if seen > 0 {
            // A little headroom: data of the same shape renders to similar lengths.
            return seen + seen / 8;
        }
        match &self.inner {
            Inner::Go { src, .. } => src.len() + src.len() / 2,
            Inner::Tera(_) => 0,
        }
    }

    fn note_length(&self, len: usize) {
        if len > self.longest.load(Ordering::Relaxed) {
            self.longest.store(len, Ordering::Relaxed);
        }
    }

    pub fn options(&self) -> &Options {
        &self.options
    }
}

/// Every function name the text engine knows (Go builtins, sprig, Sveltos), sorted.
pub fn function_names() -> Vec<&'static str> {
    funcs::names()
}
