//! What the tests against the API test server share.

use kube::config::{KubeConfigOptions, Kubeconfig};
use sluice_testserver::TestServer;

/// A client of `cluster` of `server`, from the server's kubeconfig.
pub async fn client(server: &TestServer, cluster: &str) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig_yaml()).expect("kubeconfig parses");
    let options = KubeConfigOptions {
        context: Some(cluster.to_string()),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("kubeconfig context loads");
    kube::Client::try_from(config).expect("client builds")
}
