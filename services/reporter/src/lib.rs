//! The reporter service.
