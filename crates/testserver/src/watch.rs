//! Watch streams: newline-delimited JSON events over a chunked response. Replays retained history
//! after the requested resourceVersion, answers an expired one with an `ERROR` event carrying a 410
//! `Status` (as the real server does), sends bookmarks when asked, and ends on timeout, on a fault
//! that drops watches, or when the client goes away.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use crate::cluster::{Change, ChangeKind, Cluster, WatchStart};
use crate::error::ApiError;
use crate::query::Filter;
use crate::resources::ResourceInfo;
use crate::table;

/// Query parameters of a watch request.
#[derive(Clone, Debug, Default)]
pub struct WatchParams {
    pub resource_version: Option<String>,
    pub bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Option<Duration>,
    /// `Some(includeObject)` when the client asked for Table rows.
    pub table: Option<String>,
    /// Whether events carry the objects' metadata only (`as=PartialObjectMetadata`).
    pub partial: bool,
}

/// The key of a change's metadata-only encoding among its encodings by version
/// (`Change::encoded`); no version is named so.
const PARTIAL: &str = "as=PartialObjectMetadata";

/// How often an idle watch with bookmarks enabled reports progress.
const BOOKMARK_INTERVAL: Duration = Duration::from_millis(500);
/// Default watch duration when the client gives no timeout (the real server picks 30 to 60 minutes).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

struct Stream {
    info: ResourceInfo,
    version: String,
    services: crate::conversion::ServiceUrls,
    filter: Filter,
    params: WatchParams,
    tx: mpsc::Sender<Result<Bytes, std::convert::Infallible>>,
}

/// Starts a watch and returns the streaming response.
pub(crate) fn serve(
    cluster: Arc<Cluster>,
    target: crate::api::Target,
    filter: Filter,
    params: WatchParams,
) -> Result<Response, ApiError> {
    let crate::api::Target {
        info,
        version,
        services,
        ..
    } = target;
    let gr = info.gr();
    let rv_param = params
        .resource_version
        .clone()
        .filter(|rv| !rv.is_empty() && rv != "0");
    let (tx, rx) = mpsc::channel(256);
    let stream = Stream {
        info,
        version,
        services,
        filter,
        params,
        tx,
    };
    let mut initial: Vec<(ChangeKind, Value)> = Vec::new();
    let start: Result<(WatchStart, u64), String>;
    let latest;
    {
        let mut state = cluster.lock();
        let current = state.resource_version();
        latest = state.latest();
        match rv_param.as_deref().map(str::parse::<u64>) {
            Some(Err(_)) => return Err(ApiError::bad_request("resourceVersion must be a number")),
            Some(Ok(rv)) if !stream.params.send_initial_events => {
                if cluster.faults.take_gone() {
                    start = Err(format!(
                        "too old resource version: {rv} ({current}) (injected fault)"
                    ));
                } else {
                    start = state
                        .watch_from(&gr, rv)
                        .map(|w| (w, current))
                        .map_err(|compacted| {
                            format!("too old resource version: {rv} ({compacted})")
                        });
                }
            }
            _ => {
                for (_, obj) in state.list(&gr, stream.filter.namespace.as_deref(), None) {
                    if stream.filter.matches(obj) {
                        initial.push((ChangeKind::Added, obj.clone()));
                    }
                }
                start = Ok(((Vec::new(), state.subscribe(&gr)), current));
            }
        }
    }
    let drops = cluster.faults.drop_signal();
    let stalls = cluster.faults.stall_signal();
    tokio::spawn(async move {
        match start {
            Err(message) => {
                let status = ApiError::gone(message).status();
                stream
                    .send_raw(json!({"type": "ERROR", "object": status}))
                    .await;
            }
            Ok(((replay, rx), current)) => {
                stream
                    .run(initial, replay, rx, current, latest, (drops, stalls))
                    .await
            }
        }
    });
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    Response::builder()
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(body)
        .map_err(|e| {
            ApiError::new(
                500,
                "InternalError",
                format!("failed to build watch response: {e}"),
            )
        })
}

impl Stream {
    async fn send_raw(&self, event: Value) -> bool {
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        self.tx.send(Ok(Bytes::from(line))).await.is_ok()
    }

    /// The object as this watch presents it: in the watch's version (converted by the CRD's
    /// strategy), defaulted by that version's schema.
    fn present(&self, object: Value) -> Result<Value, ApiError> {
        let mut object =
            crate::conversion::convert(&self.info, &self.services, vec![object], &self.version)?
                .pop()
                .unwrap_or_default();
        object["apiVersion"] = json!(self.info.api_version(&self.version));
        object["kind"] = json!(self.info.kind);
        crate::schema::default_on_read(&self.info.schemas, &self.version, &mut object);
        Ok(object)
    }

    /// Sends one event with the object in the watch's version; a failed conversion ends the
    /// watch with an `ERROR` event carrying the failure, as apiserver does.
    async fn send(&self, kind: &str, object: Value) -> bool {
        let mut object = match self.present(object) {
            Ok(object) => object,
            Err(e) => {
                self.send_raw(json!({"type": "ERROR", "object": e.status()}))
                    .await;
                return false;
            }
        };
        if let Some(include) = &self.params.table {
            object = table::table(
                &self.info.group,
                &self.info.kind,
                &[object],
                json!({}),
                include,
            );
        } else if self.params.partial {
            object = table::partial(&object);
        }
        self.send_raw(json!({"type": kind, "object": object})).await
    }

    /// Sends one committed change as [`Stream::send`] does. Its object is encoded once per
    /// version, and once in its metadata-only form, for every watch (`Change::encoded`), unless
    /// this watch wants Table rows or the object goes through the conversion webhook (whose
    /// answer may differ from call to call, and may change labels and annotations).
    async fn send_change(&self, kind: &str, change: &Change) -> bool {
        let through_webhook = matches!(
            self.info.conversion,
            crate::conversion::Strategy::Webhook(_)
        ) && change.object.get("apiVersion").and_then(Value::as_str)
            != Some(self.info.api_version(&self.version).as_str());
        if self.params.table.is_some() || through_webhook {
            return self.send(kind, (*change.object).clone()).await;
        }
        let encoded = if self.params.partial {
            // Conversion and defaults leave the metadata as stored, so every metadata-only
            // watch of the resource shares one encoding, whatever its version.
            change.encoded(PARTIAL, None, |object| {
                Ok::<_, ApiError>(Bytes::from(
                    serde_json::to_vec(&table::partial(object)).unwrap_or_default(),
                ))
            })
        } else {
            let schema = self.info.schema(&self.version);
            change.encoded(&self.version, schema, |object| {
                let object = self.present(object.clone())?;
                Ok::<_, ApiError>(Bytes::from(serde_json::to_vec(&object).unwrap_or_default()))
            })
        };
        let object = match encoded {
            Ok(object) => object,
            Err(e) => {
                self.send_raw(json!({"type": "ERROR", "object": e.status()}))
                    .await;
                return false;
            }
        };
        let mut line = Vec::with_capacity(object.len() + kind.len() + 24);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(kind.as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        line.extend_from_slice(&object);
        line.extend_from_slice(b"}\n");
        self.tx.send(Ok(Bytes::from(line))).await.is_ok()
    }

    async fn bookmark(&self, rv: u64, initial_end: bool) -> bool {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": self.info.kind, "apiVersion": self.info.api_version(&self.version), "metadata": meta});
        self.send_raw(json!({"type": "BOOKMARK", "object": object}))
            .await
    }

    /// The event type a change produces for this watch's filter, if any.
    fn event_for(&self, change: &Change) -> Option<&'static str> {
        if change.gr != self.info.gr() {
            return None;
        }
        let now = self.filter.matches(&change.object);
        let before = change
            .previous
            .as_ref()
            .is_some_and(|p| self.filter.matches(p));
        match (change.kind, before, now) {
            (ChangeKind::Added, _, true) => Some("ADDED"),
            (ChangeKind::Deleted, _, true) => Some("DELETED"),
            (ChangeKind::Modified, true, true) => Some("MODIFIED"),
            (ChangeKind::Modified, false, true) => Some("ADDED"),
            (ChangeKind::Modified, true, false) => Some("DELETED"),
            _ => None,
        }
    }

    async fn run(
        self,
        initial: Vec<(ChangeKind, Value)>,
        replay: Vec<Arc<Change>>,
        mut rx: broadcast::Receiver<Arc<Change>>,
        start_rv: u64,
        latest: Arc<std::sync::atomic::AtomicU64>,
        (mut drops, mut stalls): (
            tokio::sync::watch::Receiver<u64>,
            tokio::sync::watch::Receiver<bool>,
        ),
    ) {
        drops.borrow_and_update();
        for (kind, obj) in initial {
            if !self.send(kind.as_str(), obj).await {
                return;
            }
        }
        if self.params.send_initial_events
            && self.params.bookmarks
            && !self.bookmark(start_rv, true).await
        {
            return;
        }
        let mut last_sent = start_rv;
        for change in replay {
            if let Some(kind) = self.event_for(&change) {
                if !self.send_change(kind, &change).await {
                    return;
                }
            }
            last_sent = last_sent.max(change.rv);
        }
        let mut seen = last_sent;
        let deadline = tokio::time::sleep(self.params.timeout.unwrap_or(DEFAULT_TIMEOUT));
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // A stalled watch (`Faults::stall_watches`) takes nothing from its feed: what
            // arrives meanwhile waits there, and ends the stream once the feed overflows.
            let stalled = *stalls.borrow_and_update();
            tokio::select! {
                _ = &mut deadline => return,
                _ = drops.changed() => return,
                _ = self.tx.closed() => return,
                changed = stalls.changed() => if changed.is_err() {
                    return;
                },
                _ = ticker.tick(), if !stalled => {
                    // Changes of other kinds move the cluster's version too. A change is sent to
                    // the feeds before `latest` shows it, so once nothing of this watch's feed
                    // is waiting, every change of its kind up to `latest` has been handled.
                    let moved = latest.load(std::sync::atomic::Ordering::SeqCst);
                    if rx.is_empty() {
                        seen = seen.max(moved);
                    }
                    if self.params.bookmarks && seen > last_sent {
                        if !self.bookmark(seen, false).await {
                            return;
                        }
                        last_sent = seen;
                    }
                }
                msg = rx.recv(), if !stalled => match msg {
                    Ok(change) => {
                        if change.rv <= seen {
                            continue;
                        }
                        seen = change.rv;
                        if let Some(kind) = self.event_for(&change) {
                            if !self.send_change(kind, &change).await {
                                return;
                            }
                            last_sent = change.rv;
                        }
                    }
                    // A slow consumer lost events: end the stream so the client re-watches from its last version.
                    Err(_) => return,
                }
            }
        }
    }
}
