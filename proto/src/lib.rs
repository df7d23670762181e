//! The wire contract of the sluice pipeline, generated from `proto/sluice/v1/*.proto`.

pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/sluice.v1.rs"));
}
