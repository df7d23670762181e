//! The renderer service.
