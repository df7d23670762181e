//! Building clients: the management cluster from a kubeconfig file (or in-cluster), managed
//! clusters from the kubeconfig text held in their Secret.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::{Error, Result};

/// Client from kubeconfig text (a managed cluster's Secret), optionally for one context.
pub async fn from_kubeconfig_text(text: &str, context: Option<&str>) -> Result<Client> {
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| Error::Kubeconfig {
        source: Box::new(e),
    })?;
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| Error::Kubeconfig {
            source: Box::new(e),
        })?;
    Client::try_from(config).map_err(|e| Error::Kubeconfig {
        source: Box::new(e),
    })
}

/// The management cluster: the given kubeconfig file, else in-cluster config, else `KUBECONFIG`.
pub async fn management(path: Option<&Path>, context: Option<&str>) -> Result<Client> {
    match path {
        Some(path) => {
            let text =
                tokio::fs::read_to_string(path)
                    .await
                    .map_err(|source| Error::ReadKubeconfig {
                        path: path.display().to_string(),
                        source,
                    })?;
            from_kubeconfig_text(&text, context).await
        }
        None => {
            let config = Config::infer().await.map_err(|e| Error::Kubeconfig {
                source: Box::new(e),
            })?;
            Client::try_from(config).map_err(|e| Error::Kubeconfig {
                source: Box::new(e),
            })
        }
    }
}

/// The management-cluster client of a service, from its common options; the service's
/// readiness then requires the API server to answer ([`crate::reachability::api_check`], until
/// `token` is cancelled).
pub async fn for_service(
    common: &sluice_runtime::CommonArgs,
    health: &sluice_runtime::Health,
    token: &tokio_util::sync::CancellationToken,
) -> Result<Client> {
    let client = management(common.kubeconfig.as_deref(), common.kube_context.as_deref()).await?;
    health.require("kubernetes", crate::reachability::api_check(&client, token));
    Ok(client)
}
