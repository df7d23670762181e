//! The evaluator service.
