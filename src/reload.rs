//! Config reloads (`ReloadConfig` and SIGHUP): the config file is read and validated again;
//! queue settings that may change while running go to the matchmaker loop, which rebuilds the
//! pools with every waiting ticket and only then switches the state's queue configs. A file
//! that does not load, or that changes what a running server cannot change, is refused and the
//! running config stays.
//!
//! What may change per queue: `matching` (windows, expansion, quality floor, latency, TTL,
//! regions, roles, party size), `rules`, `ready_check_seconds`, `backfill` and
//! `max_party_size`. What may not: the set of queues, a queue's `teams`, `team_size`,
//! `rating_pool`, `rating` (the pool's system), `ranking` and `tick_interval_ms`. Sections other
//! than `[queues]` are read at start only; a reload that changes them logs that a restart is
//! needed and applies the queue changes.
//!
//! In cluster mode an accepted reload's queue settings are also kept in the store (Redis), so
//! the next owner of the queues starts with them: of that reload and its own file, the newer
//! wins, each only if a reload could apply it. Both times are compared on Redis's clock, which
//! every node shares: the reload is stamped with it, and the file's modification time (on the
//! node's own clock) is moved onto it by how far the node's clock is from Redis's when it takes
//! the queues. A node whose clock is off by an hour then still tells an edit made after the
//! reload from one made before.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use std::collections::BTreeMap;

use crate::config::{Config, ConfigError, QueueConfig};
use crate::ids::QueueId;
use crate::matchmaker::{Command, Handle, HandleError};
use crate::store::{ReloadedQueues, Store, StoreError};

/// Why a reload was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the server was started without --config: there is no file to reload")]
    NoFile,
    /// The file does not load or validate (the message names the key).
    #[error("the config file was refused and the running config stays: {0}")]
    Config(#[from] ConfigError),
    /// A change a running server cannot make.
    #[error("the config file was refused and the running config stays: {0}")]
    Refused(String),
    #[error(transparent)]
    Loop(#[from] HandleError),
    /// Applied here, but the store could not keep it for the next owner.
    #[error("the reload was applied but could not be kept for the next owner: {0}")]
    Store(#[from] StoreError),
}

/// The queue settings to apply (pure): each changed queue's new config, in name order, or why
/// the new config cannot be applied while running.
pub fn plan(running: &Config, new: &Config) -> Result<Vec<(QueueId, QueueConfig)>, ReloadError> {
    let added: Vec<&str> = new
        .queues
        .keys()
        .filter(|q| !running.queues.contains_key(*q))
        .map(String::as_str)
        .collect();
    let removed: Vec<&str> = running
        .queues
        .keys()
        .filter(|q| !new.queues.contains_key(*q))
        .map(String::as_str)
        .collect();
    if !added.is_empty() || !removed.is_empty() {
        return Err(ReloadError::Refused(format!(
            "queues cannot be added or removed while running (added: [{}], removed: [{}]); restart to change the set of queues",
            added.join(", "),
            removed.join(", ")
        )));
    }
    let mut changed = Vec::new();
    for (name, old) in &running.queues {
        let q = &new.queues[name];
        let fixed = [
            ("teams", json(&old.teams) == json(&q.teams)),
            ("team_size", json(&old.team_size) == json(&q.team_size)),
            (
                "rating_pool",
                json(&old.rating_pool) == json(&q.rating_pool),
            ),
            ("rating", json(&old.rating) == json(&q.rating)),
            ("ranking", json(&old.ranking) == json(&q.ranking)),
            (
                "tick_interval_ms",
                json(&old.tick_interval_ms) == json(&q.tick_interval_ms),
            ),
        ];
        if let Some((key, _)) = fixed.iter().find(|(_, same)| !same) {
            return Err(ReloadError::Refused(format!(
                "queues.{name}.{key} cannot change while running (a pool's rating system and a queue's shape are fixed); restart to change it"
            )));
        }
        if json(old) != json(q) {
            changed.push((QueueId::new(name.as_str()), q.clone()));
        }
    }
    Ok(changed)
}

/// Sections read at start only that differ (pure), for the log: every section but the queues.
pub fn restart_only_changes(running: &Config, new: &Config) -> Vec<String> {
    let (serde_json::Value::Object(old), serde_json::Value::Object(new)) =
        (json(running), json(new))
    else {
        return Vec::new();
    };
    old.iter()
        .filter(|(name, value)| *name != "queues" && new.get(*name) != Some(*value))
        .map(|(name, _)| name.clone())
        .collect()
}

/// `config` with the newest queue settings a reload could apply, for a cluster node starting
/// its engine after taking the queues: those of the last reload an owner accepted (`reloaded`,
/// kept in the store, stamped on the store's clock) or those its own file holds now, whichever
/// is newer. So a reload sent to an earlier owner is not lost by a failover, and a file edited
/// since still counts. The file's modification time is on this node's clock: `store_ahead`
/// (the store's clock less this node's, now) moves it onto the store's before the two are
/// compared. Neither applicable: `config` as it is.
pub fn with_current_queues(
    mut config: Config,
    reloaded: Option<&ReloadedQueues>,
    store_ahead: f64,
) -> Config {
    let from_file = config.source.clone().and_then(|source| {
        match Config::load(Some(&source.path), &source.overrides)
            .map(|new| new.as_running(&config))
            .map_err(ReloadError::from)
            .and_then(|new| plan(&config, &new).map(|_| new))
        {
            Ok(new) => Some((new.queues, modified_unix(&source.path) + store_ahead)),
            Err(e) => {
                tracing::warn!(error = %e, "the config file's queue settings do not apply");
                None
            }
        }
    });
    let from_reload = reloaded.and_then(|r| match applicable(&config, r) {
        Ok(queues) => Some((queues, r.unix)),
        Err(e) => {
            tracing::warn!(error = %e, "the last reload's queue settings do not apply");
            None
        }
    });
    let queues = match (from_file, from_reload) {
        (Some(file), Some(reload)) if reload.1 >= file.1 => {
            tracing::info!(
                reloaded_unix = reload.1,
                "queue settings of the last reload an owner accepted (newer than this node's file)"
            );
            reload.0
        }
        (Some(file), _) => file.0,
        (None, Some(reload)) => reload.0,
        (None, None) => {
            tracing::warn!("starting with the queue settings loaded at start");
            return config;
        }
    };
    let changed: Vec<&String> = queues
        .iter()
        .filter(|(name, q)| {
            config
                .queues
                .get(*name)
                .is_none_or(|old| json(old) != json(q))
        })
        .map(|(name, _)| name)
        .collect();
    if !changed.is_empty() {
        tracing::info!(changed_queues = ?changed, "queue settings changed since start");
    }
    config.queues = queues;
    config
}

/// A kept reload's queues, if a reload could apply them to `running`.
fn applicable(
    running: &Config,
    reload: &ReloadedQueues,
) -> Result<BTreeMap<String, QueueConfig>, ReloadError> {
    let mut queues: BTreeMap<String, QueueConfig> =
        serde_json::from_value(reload.queues.clone())
            .map_err(|e| ReloadError::Refused(format!("the kept reload does not decode: {e}")))?;
    // The matcher's copies of the queue keys (the rules among them) are not stored.
    crate::config::settle_queues(&mut queues)?;
    let mut candidate = running.clone();
    candidate.queues = queues;
    candidate.validate()?;
    plan(running, &candidate)?;
    Ok(candidate.queues)
}

/// Unix seconds of a file's last change on this machine's clock (0 when unknown, so a kept
/// reload wins).
fn modified_unix(path: &std::path::Path) -> f64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

fn json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

/// Reloads the running server's config. Cloneable; reloads run one at a time.
#[derive(Clone)]
pub struct Reloader {
    running: Arc<tokio::sync::Mutex<Config>>,
    matchmaker: Handle,
    /// Keeps each accepted reload for the next owner (a cluster store; the embedded one keeps
    /// nothing).
    store: Store,
}

impl Reloader {
    pub fn new(running: Config, matchmaker: Handle, store: Store) -> Self {
        Self {
            running: Arc::new(tokio::sync::Mutex::new(running)),
            matchmaker,
            store,
        }
    }

    /// Reads the file again and applies the queue changes; the names of the queues that changed.
    pub async fn reload(&self) -> Result<Vec<String>, ReloadError> {
        let mut running = self.running.lock().await;
        let source = running.source.clone().ok_or(ReloadError::NoFile)?;
        let new = Config::load(Some(&source.path), &source.overrides)?.as_running(&running);
        let changes = plan(&running, &new)?;
        let restart = restart_only_changes(&running, &new);
        if !restart.is_empty() {
            tracing::warn!(
                sections = ?restart,
                "config reload: these sections are read at start only; restart to apply them"
            );
        }
        let names: Vec<String> = changes.iter().map(|(q, _)| q.to_string()).collect();
        if !changes.is_empty() {
            let applied = self
                .matchmaker
                .ask(|reply| Command::Reconfigure {
                    queues: changes,
                    reply,
                })
                .await?;
            applied.map_err(ReloadError::Refused)?;
        }
        // What is running now: the new queues, the rest as started, whether or not keeping
        // them for the next owner succeeds below (a reload that fails there runs all the same,
        // and the next compares against it).
        running.queues = new.queues;
        self.store.put_reloaded_queues(&ReloadedQueues {
            unix: self.store.now_unix(),
            queues: json(&running.queues),
        })?;
        self.store.flush_async().await?;
        tracing::info!(changed_queues = ?names, "config reloaded");
        Ok(names)
    }

    /// Reloads on every SIGHUP until `shutdown`, logging the outcome. The signal is watched
    /// from this call on, not from when the returned future first runs: a SIGHUP sent as soon
    /// as the server said it serves (after this call) is not missed while the task that runs
    /// the future waits for its turn.
    #[cfg(unix)]
    pub fn on_sighup(
        self,
        shutdown: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        async move {
            let Ok(mut hup) = hup else {
                tracing::warn!("SIGHUP cannot be watched: reload with the ReloadConfig call");
                return;
            };
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    got = hup.recv() => {
                        if got.is_none() {
                            return;
                        }
                        match self.reload().await {
                            Ok(changed) => tracing::info!(?changed, "SIGHUP: config reloaded"),
                            Err(e) => tracing::error!(error = %e, "SIGHUP: config reload refused"),
                        }
                    }
                }
            }
        }
    }

    /// No SIGHUP here: reload with the `ReloadConfig` call.
    #[cfg(not(unix))]
    pub fn on_sighup(
        self,
        shutdown: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        async move { shutdown.cancelled_owned().await }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        Config::from_toml_str(extra).unwrap()
    }

    fn refusal(e: ReloadError) -> String {
        match e {
            ReloadError::Refused(m) => m,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// A reload kept for the next owner carries the queues as users write them; the next
    /// owner's matcher still gets their rules.
    #[test]
    fn a_kept_reload_keeps_the_queues_match_rules() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/rules-5v5.toml"),
        )
        .unwrap();
        let running = config(&text);
        assert!(!running.queues["5v5"].matching.rules.is_empty());
        let mut changed = running.queues.clone();
        changed.get_mut("5v5").unwrap().matching.window = 2.5;
        let kept = ReloadedQueues {
            unix: f64::MAX,
            queues: json(&changed),
        };
        applicable(&running, &kept).unwrap();
        let next = with_current_queues(running.clone(), Some(&kept), 0.0);
        let q = &next.queues["5v5"];
        assert_eq!(q.matching.window, 2.5, "the kept reload applies");
        assert_eq!(json(&q.matching.rules), json(&running.queues["5v5"].rules));
        assert_eq!(
            q.matching.max_party_size,
            running.queues["5v5"].matching.max_party_size
        );
    }

    #[test]
    fn only_changed_queues_are_planned() {
        let running = config("");
        assert!(plan(&running, &config("")).unwrap().is_empty());
        let new = config("[queues.1v1.matching]\nwindow = 75.0\n");
        let changes = plan(&running, &new).unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].0.as_str(), "1v1");
        assert_eq!(changes[0].1.matching.window, 75.0);
        let ready = config("[queues.2v2]\nready_check_seconds = 15.0\n");
        let names: Vec<String> = plan(&running, &ready)
            .unwrap()
            .iter()
            .map(|(q, _)| q.to_string())
            .collect();
        assert_eq!(names, vec!["2v2"]);
    }

    #[test]
    fn a_new_queue_a_removed_queue_or_a_new_rating_system_is_refused() {
        let running = config("");
        let added = config(
            "[queues.duo]\nteams = 2\nteam_size = 1\nmax_party_size = 1\nranking = \"none\"\n",
        );
        let m = refusal(plan(&running, &added).unwrap_err());
        assert!(m.contains("added: [duo]"), "{m}");
        let m = refusal(plan(&added, &running).unwrap_err());
        assert!(m.contains("removed: [duo]"), "{m}");
        let elo = config("[queues.1v1.rating]\nsystem = \"elo\"\n");
        let m = refusal(plan(&running, &elo).unwrap_err());
        assert!(m.contains("queues.1v1.rating cannot change"), "{m}");
        let shape = config("[queues.2v2]\nteam_size = 3\nmax_party_size = 3\n");
        let m = refusal(plan(&running, &shape).unwrap_err());
        assert!(m.contains("queues.2v2.team_size"), "{m}");
    }

    #[test]
    fn other_sections_are_reported_as_needing_a_restart() {
        let running = config("");
        let new = config("[server]\ntick_interval_ms = 70\n");
        assert_eq!(restart_only_changes(&running, &new), vec!["server"]);
        let new = config("[history]\nmatches_per_player = 50\n");
        assert_eq!(restart_only_changes(&running, &new), vec!["history"]);
        assert!(plan(&running, &new).unwrap().is_empty());
    }

    #[test]
    fn an_engine_starts_with_the_file_as_it_is_now_when_a_reload_could_apply_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.toml");
        std::fs::write(&file, "[queues.1v1.matching]\nwindow = 50.0\n").unwrap();
        let started = Config::load(Some(&file), &crate::config::Overrides::default()).unwrap();
        std::fs::write(&file, "[queues.1v1.matching]\nwindow = 90.0\n").unwrap();
        let now = with_current_queues(started.clone(), None, 0.0);
        assert_eq!(now.queues["1v1"].matching.window, 90.0);
        // A reload kept by an earlier owner wins when it is newer than the file, not when older.
        let kept = |reloaded: &str, unix: f64| ReloadedQueues {
            unix,
            queues: json(&config(reloaded).queues),
        };
        let wider = "[queues.1v1.matching]\nwindow = 70.0\n";
        let newer = kept(wider, modified_unix(&file) + 1.0);
        let newer = with_current_queues(started.clone(), Some(&newer), 0.0);
        assert_eq!(newer.queues["1v1"].matching.window, 70.0);
        let older = with_current_queues(started.clone(), Some(&kept(wider, 1.0)), 0.0);
        assert_eq!(older.queues["1v1"].matching.window, 90.0);
        // One a reload would refuse is passed over.
        let elo = kept("[queues.1v1.rating]\nsystem = \"elo\"\n", f64::MAX);
        let refused = with_current_queues(started.clone(), Some(&elo), 0.0);
        assert_eq!(refused.queues["1v1"].matching.window, 90.0);
        // A file a reload would refuse leaves the settings loaded at start.
        std::fs::write(&file, "[queues.1v1.rating]\nsystem = \"elo\"\n").unwrap();
        let kept = with_current_queues(started.clone(), None, 0.0);
        assert_eq!(kept.queues["1v1"].matching.window, 50.0);
        assert_eq!(
            json(&kept.queues["1v1"].rating),
            json(&started.queues["1v1"].rating)
        );
    }

    /// A node whose clock is an hour behind the store's (Redis's) compares its file's time
    /// with a kept reload's on the store's clock: an edit made half an hour after the reload
    /// wins over it, and a reload made after the edit wins over the file.
    #[test]
    fn a_node_an_hour_behind_tells_a_file_edited_after_a_reload_from_one_edited_before() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.toml");
        std::fs::write(&file, "[queues.1v1.matching]\nwindow = 50.0\n").unwrap();
        let started = Config::load(Some(&file), &crate::config::Overrides::default()).unwrap();
        std::fs::write(&file, "[queues.1v1.matching]\nwindow = 90.0\n").unwrap();
        let behind = 3600.0;
        // The file was edited at `edited` on the store's clock.
        let edited = modified_unix(&file) + behind;
        let kept = |unix: f64| ReloadedQueues {
            unix,
            queues: json(&config("[queues.1v1.matching]\nwindow = 70.0\n").queues),
        };
        let earlier = with_current_queues(started.clone(), Some(&kept(edited - 1800.0)), behind);
        assert_eq!(
            earlier.queues["1v1"].matching.window, 90.0,
            "the newer file"
        );
        let later = with_current_queues(started.clone(), Some(&kept(edited + 60.0)), behind);
        assert_eq!(
            later.queues["1v1"].matching.window, 70.0,
            "the newer reload"
        );
    }

    /// A SIGHUP that comes after `on_sighup` was called, before its future first ran (a signal
    /// sent as soon as the server logged that it serves), still reloads.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_sighup_sent_before_the_watch_first_runs_still_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.toml");
        std::fs::write(&file, "[queues.1v1.matching]\nwindow = 50.0\n").unwrap();
        let started = Config::load(Some(&file), &crate::config::Overrides::default()).unwrap();
        let store: Store = Arc::new(crate::store::MemoryStore::default());
        let state = crate::state::State::load(Arc::new(started.clone()), store.clone()).unwrap();
        let shutdown = CancellationToken::new();
        let clock = crate::matchmaker::Clock::start();
        let (handle, _loop) =
            crate::matchmaker::spawn(state, clock, shutdown.clone(), Vec::new()).unwrap();
        let reloader = Reloader::new(started, handle, store);
        std::fs::write(&file, "[queues.1v1.matching]\nwindow = 70.0\n").unwrap();
        let watching = reloader.clone().on_sighup(shutdown.clone());
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let task = tokio::spawn(watching);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let window = reloader.running.lock().await.queues["1v1"].matching.window;
            if window == 70.0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the SIGHUP was missed: window still {window}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        shutdown.cancel();
        task.await.unwrap();
    }
}
