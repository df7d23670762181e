//! Domain types and pure logic of sluice: the Sveltos API objects, selectors, names and labels. Knows nothing of the wire, the bus or the cluster.
pub mod cloudevent;
pub mod cluster;
pub mod config;
pub mod configdata;
pub mod conversion;
pub mod crds;
pub mod eventsource;
pub mod eventtrigger;
pub mod gocase;
pub mod naming;
pub mod natsconfig;
pub mod pattern;
pub mod reference;
pub mod selector;
pub mod size;
