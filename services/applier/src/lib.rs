//! The applier service.
