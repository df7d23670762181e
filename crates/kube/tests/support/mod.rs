//! What the tests against the API test server share.

use sluice_testserver::TestServer;

/// A client of `cluster` of `server`, from the server's kubeconfig, built as the services build
/// theirs.
pub async fn client(server: &TestServer, cluster: &str) -> kube::Client {
    sluice_kube::client::from_kubeconfig_text(&server.kubeconfig_yaml(), Some(cluster))
        .await
        .expect("client builds")
}
