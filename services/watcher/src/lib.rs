//! The watcher service.
