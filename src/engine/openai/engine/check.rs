//! What the engine asks its endpoints besides prompts: at start, `GET /v1/models` (reachable,
//! and serving the model?) and `/version`; at the end of a step, every endpoint's `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::super::scrape;
use super::{CHECK_TIMEOUT, ERROR_BODY_BYTES, Shared};
use crate::engine::ServerCounters;

/// Most bytes read of a model listing or a `/metrics` page.
const LISTING_BYTES: usize = 16 << 20;

/// What `start` learned of an endpoint.
pub(super) enum Check {
    /// It serves the model (its `/version`, where it has one).
    Serves { version: Option<String> },
    /// It answered, and the answer makes the configuration wrong (another model, a refused key).
    Refused(String),
    /// It could not be reached (or answered 5xx): out of rotation until probed.
    Unreachable(String),
}

/// `GET /v1/models`: reachable, and serving the model?
pub(super) async fn check_endpoint(shared: &Shared, url: &str) -> Check {
    let model = &shared.config.model;
    let limit = CHECK_TIMEOUT.min(shared.config.timeout.unwrap_or(CHECK_TIMEOUT));
    let models = async {
        let response = shared.get(&format!("{url}/v1/models")).await?;
        let status = response.status();
        let text = response.text(LISTING_BYTES).await?;
        Ok::<_, String>((status, text))
    };
    let (status, text) = match tokio::time::timeout(limit, models).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return Check::Unreachable(e),
        Err(_) => return Check::Unreachable(format!("no answer to GET /v1/models within {limit:?}")),
    };
    match status.as_u16() {
        200..=299 => {}
        401 | 403 => {
            let key = match &shared.config.api_key_env {
                Some(name) => format!("check the key in ${name}"),
                None => "set `engine.openai.api_key_env` to the variable that holds the key".into(),
            };
            return Check::Refused(format!("{url} refused GET /v1/models with HTTP {status}: {key}"));
        }
        // A server without the listing: the model is checked by the first request instead.
        404 => {
            tracing::warn!(endpoint = %url, "no GET /v1/models: cannot check that it serves {model}");
            return Check::Serves { version: server_version(shared, url).await };
        }
        _ => return Check::Unreachable(format!("GET /v1/models answered HTTP {status}")),
    }
    let served: Vec<String> = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v.get("data").and_then(Value::as_array).cloned())
        .map(|data| data.iter().filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_owned)).collect())
        .unwrap_or_default();
    if served.iter().any(|m| m == model) {
        Check::Serves { version: server_version(shared, url).await }
    } else {
        let list = if served.is_empty() { "none listed".to_owned() } else { served.join(", ") };
        Check::Refused(format!("{url} does not serve `engine.openai.model` \"{model}\" (it serves: {list})"))
    }
}

/// `GET /version` (vLLM's `{"version": "0.x"}`), where the server has it.
async fn server_version(shared: &Shared, url: &str) -> Option<String> {
    let get = async {
        let response = shared.get(&format!("{url}/version")).await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let v: Value = serde_json::from_str(&response.text(ERROR_BODY_BYTES).await.ok()?).ok()?;
        v.get("version").and_then(Value::as_str).map(str::to_owned)
    };
    tokio::time::timeout(CHECK_TIMEOUT, get).await.ok().flatten()
}

/// Every endpoint's `/metrics` now, at once; those without one (or unreachable) are left out.
/// Waits on the engine's runtime from any thread, never longer than [`CHECK_TIMEOUT`].
pub(super) fn server_counters(shared: &Arc<Shared>) -> Vec<ServerCounters> {
    let (tx, rx) = std::sync::mpsc::channel();
    let task = shared.clone();
    drop(shared.runtime.spawn(async move {
        let scrapes = task.endpoints.iter().map(|e| scrape_endpoint(&task, &e.url));
        let all = tokio::time::timeout(CHECK_TIMEOUT, futures_util::future::join_all(scrapes)).await;
        let _ = tx.send(all.map(|all| all.into_iter().flatten().collect()).unwrap_or_default());
    }));
    rx.recv_timeout(CHECK_TIMEOUT + Duration::from_secs(1)).unwrap_or_default()
}

async fn scrape_endpoint(shared: &Shared, url: &str) -> Option<ServerCounters> {
    let response = shared.get(&format!("{url}/metrics")).await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let text = response.text(LISTING_BYTES).await.ok()?;
    Some(ServerCounters { endpoint: url.to_owned(), counters: scrape::parse_counters(&text) })
}
