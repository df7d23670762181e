//! What the tests against the API test server share.

use sluice_testserver::TestServer;

/// A client of `cluster` of `server`, from the server's kubeconfig, built as the services build
/// theirs.
pub async fn client(server: &TestServer, cluster: &str) -> kube::Client {
    sluice_kube::client::client_of(config(server, cluster).await).expect("client builds")
}

/// The configuration of [`client`].
pub async fn config(server: &TestServer, cluster: &str) -> kube::Config {
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&server.kubeconfig_yaml()).expect("kubeconfig");
    let options = kube::config::KubeConfigOptions {
        context: Some(cluster.into()),
        ..Default::default()
    };
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("config")
}
