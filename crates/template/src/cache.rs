//! A bounded cache of parsed templates keyed by (content, options), so each distinct template
//! is parsed once however many events render it. Eviction is least-recently-inserted.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::{Options, Result, Template};

type Key = (Arc<str>, Options);

/// Parsed templates shared between renders (and threads).
#[derive(Debug)]
pub struct TemplateCache {
    capacity: usize,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<Key, Arc<Template>>,
    order: VecDeque<Key>,
}

impl TemplateCache {
    /// A cache holding at most `capacity` templates (at least one).
    pub fn new(capacity: usize) -> Self {
        TemplateCache {
            capacity: capacity.max(1),
            inner: Mutex::new(Entries::default()),
        }
    }

    /// The parsed template for `text` and `options`, parsing it on first use. Parse errors
    /// are not cached: they are cheap to reproduce and the caller reports them.
    pub fn get_or_parse(&self, text: &str, options: &Options) -> Result<Arc<Template>> {
        let key: Key = (Arc::from(text), options.clone());
        if let Some(t) = self.lock().map.get(&key) {
            return Ok(Arc::clone(t));
        }
        // Parse outside the lock; two threads racing on a new template both parse it once.
        let template = Arc::new(Template::parse(text, options)?);
        let mut entries = self.lock();
        if !entries.map.contains_key(&key) {
            while entries.map.len() >= self.capacity {
                let Some(oldest) = entries.order.pop_front() else {
                    break;
                };
                entries.map.remove(&oldest);
            }
            entries.order.push_back(key.clone());
            entries.map.insert(key, Arc::clone(&template));
        }
        Ok(template)
    }

    /// How many templates are cached.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
