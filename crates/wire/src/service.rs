//! What every service connects before it starts: the bus, as the service's identity (its
//! readiness then requires the connection), and the bus key that seals Secret contents.

use sluice_bus::{topology::Identity, Bus, BusOptions};
use sluice_runtime::{CommonArgs, Health};

use crate::seal::{BusKey, SealError};

/// Why a service could not start on the bus.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("failed to load the bus key")]
    Key(#[source] SealError),
    #[error("failed to connect to the bus")]
    Connect(#[source] sluice_bus::Error),
}

/// Loads the bus key (`--bus-key-file`; `None` without one), then connects as `identity`.
pub async fn connect(
    common: &CommonArgs,
    identity: Identity,
    health: &Health,
) -> Result<(Bus, Option<BusKey>), StartError> {
    let key = BusKey::load(common.bus_key_file.as_deref()).map_err(StartError::Key)?;
    let bus = Bus::connect(BusOptions::service(common, identity))
        .await
        .map_err(StartError::Connect)?;
    health.require("nats", bus.connection_probe());
    Ok((bus, key))
}
