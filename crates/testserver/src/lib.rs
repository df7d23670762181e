//! Kubernetes API test server: many clusters in one process, for tests and demos only, never production.
//!
//! One listener serves every cluster under its own base path, `https://<addr>/clusters/<name>`; kube-rs
//! and kubectl both accept a server URL with a path. With `Config::port_per_cluster` each cluster is
//! also served at the root of its own port, for tools that drop the path. Every port answers TLS
//! (a certificate authority generated at start, `TestServer::ca_pem`) and plain HTTP. Objects live in memory as JSON, per cluster,
//! keyed by group, resource, namespace and name, with one resourceVersion counter per cluster.
//!
//! What it implements: discovery (legacy, not aggregated; `/openapi/v3` with each CRD version's and built-in kind's schema, for
//! `kubectl explain` and kubectl's server-side field validation; `/openapi/v2` answers 404), built-in kinds and CRD-defined kinds (served only while their CRD exists), create, get,
//! list (label selectors, field selectors on the fields each kind offers, `limit`/`continue`
//! over the first page's snapshot),
//! watch (history replay, bookmarks, `410 Gone` as an `ERROR` event), replace, JSON patch, merge
//! patch, server-side apply with per-manager field ownership, protobuf request bodies of the kinds
//! kubectl's typed `create` commands send, `/status`, `/scale` (`api::scale`), delete with finalizers,
//! namespace cascade, what the control plane adds to namespaces and Pods and the `kubernetes`
//! Service (`cluster::controllers`), Tables for kubectl, fault injection (`Faults`, `POST /admin/clusters/<name>/faults`)
//! and a per-cluster audit log of requests (`TestServer::audit`). Writes are decoded, pruned,
//! defaulted and validated as kube-apiserver does (`admission`, `schema`, `cluster::validate`): CRD
//! structural schemas, the built-in kinds' fields at any depth (`schema::builtin`),
//! `fieldValidation` Strict/Warn/Ignore, ConfigMap/Secret rules, `422 Invalid`
//! with every cause, the 3 MiB request and 1.5 MiB stored-object limits.
//!
//! Every request is authenticated by a bearer token (the admin token of a cluster, or a
//! ServiceAccount token minted by `TestServer::service_account_token` or a `TokenRequest`) and
//! authorized by the cluster's RBAC objects, as kube-apiserver with anonymous authentication off
//! and the RBAC authorizer does (`auth`); `/admin` is the test harness's and needs no token.
//!
//! Strategic merge patches of built-in kinds merge lists by the merge keys of Kubernetes' types
//! (`patch::strategic_merge_patch`, with the strategies `schema::builtin` carries).
//!
//! Deliberate simplifications: lists are atomic for server-side apply; multi-version CRDs with
//! conversion strategy `None` store an object as written and return it with the requested
//! apiVersion (strategy `Webhook` converts through the CRD's webhook, `conversion`); no admission plugins beyond validation; schema combinators (`allOf`, `anyOf`,
//! `oneOf`, `not`) and CEL rules (`x-kubernetes-validations`) are not enforced.

mod admission;
mod api;
mod audit;
mod auth;
mod cli;
mod cluster;
mod conversion;
mod crds;
mod error;
mod faults;
mod field_error;
mod fields;
mod object;
mod openapi;
mod patch;
mod printers;
mod protobuf;
mod query;
mod resources;
mod schema;
mod server;
mod table;
mod watch;

pub use audit::{Audit, AuditEntry, Denial};
pub use auth::UserInfo;
pub use cli::{default_names, load_manifests, run_cli, Cli, CliArgs};
pub use conversion::ServiceUrls;
pub use crds::sveltos_crds;
pub use error::{ApiError, Error, Result};
pub use faults::{FaultRequest, FaultSettings, Faults};
pub use server::{Config, Inside, TestServer, THREAD_NAME};
