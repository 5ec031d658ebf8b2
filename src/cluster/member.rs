//! A node's part in one shard: the shard's lease (taken when free, renewed while held), its
//! engine while this node owns the shard's queues, and the standby copy of its state while
//! another node does. A node runs one for each shard (`[[cluster.shards]]`, plus the home
//! shard), all behind one front.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tracing::{error, info, warn};

use super::front::Route;
use super::lease::{self, Acquired, LeaseClient, Owner};
use crate::config::Config;
use crate::server;
use crate::state::Ownership;
use crate::store::{Followed, Patience, RedisOptions, RedisStore, Standby, Storage, Store};
use crate::telemetry as m;

/// One node's part in one shard.
pub(super) struct Member {
    /// Cancelled when the node starts stopping (its front closes).
    pub(super) stopping: CancellationToken,
    /// The token verifier every engine of this node uses (its keys fetched once, at start).
    pub(super) verifier: Option<Arc<crate::auth::Verifier>>,
    /// Cancelled when the node is asked to stop (before its drain): from then on it takes no
    /// lease and keeps no standby copy listed, so the queues go to a node that stays.
    pub(super) asked: CancellationToken,
    /// The config as this shard sees it: its keyspace, its queues only.
    pub(super) config: Arc<Config>,
    pub(super) node_id: String,
    pub(super) advertise: String,
    pub(super) lease: LeaseClient,
    pub(super) lease_time: Duration,
    /// What the store's connection to a `rediss://` Redis trusts and presents.
    pub(super) redis_tls: Option<crate::store::RedisTls>,
    pub(super) route: watch::Sender<Route>,
    /// The standby copy of the state (`cluster.standby`), while another node owns the queues.
    pub(super) standby: Option<Arc<tokio::sync::Mutex<Option<Standby>>>>,
    /// What the node's members report together, and this member's place in it.
    pub(super) together: Arc<Together>,
    pub(super) index: usize,
    /// Whether it holds a current standby copy now.
    pub(super) warm: AtomicBool,
    /// Set to hand the shard over to another node (see `balance`).
    pub(super) handover: AtomicBool,
    /// When this node last handed the shard over.
    pub(super) handed_over: std::sync::Mutex<Option<Instant>>,
}

/// What a node's members (one per shard) report together: the node's one [`STANDBY`] health
/// service and its gauges of queues owned and standby players.
pub(super) struct Together {
    health: HealthReporter,
    /// Per member: whether it could carry its shard on (it owns it, or holds a current copy,
    /// or keeps no copies), and the players of its copy.
    warmth: std::sync::Mutex<Vec<(bool, usize)>>,
    /// Per member: the queues it owns, while it holds its shard's lease.
    owned: std::sync::Mutex<Vec<Option<usize>>>,
}

impl Together {
    /// For `members` shards, each cold when `standby` (a copy to wait for) and ready otherwise.
    pub(super) async fn new(health: HealthReporter, members: usize, standby: bool) -> Arc<Self> {
        let together = Arc::new(Self {
            health,
            warmth: std::sync::Mutex::new(vec![(!standby, 0); members]),
            owned: std::sync::Mutex::new(vec![None; members]),
        });
        together.publish_warmth().await;
        together
    }

    async fn report(&self, index: usize, warmth: Warmth) {
        let entry = match warmth {
            Warmth::Owner => (true, 0),
            Warmth::Copy(players) => (true, players),
            Warmth::Cold => (false, 0),
        };
        self.warmth.lock().unwrap_or_else(|p| p.into_inner())[index] = entry;
        self.publish_warmth().await;
    }

    /// The players of member `index`'s copy, as it follows the owner.
    fn copy_players(&self, index: usize, players: usize) {
        let mut warmth = self.warmth.lock().unwrap_or_else(|p| p.into_inner());
        warmth[index].1 = players;
        let total: usize = warmth.iter().map(|w| w.1).sum();
        metrics::gauge!(m::CLUSTER_STANDBY_PLAYERS).set(total as f64);
    }

    async fn publish_warmth(&self) {
        let (ready, players) = {
            let warmth = self.warmth.lock().unwrap_or_else(|p| p.into_inner());
            (
                warmth.iter().all(|w| w.0),
                warmth.iter().map(|w| w.1).sum::<usize>(),
            )
        };
        metrics::gauge!(m::CLUSTER_STANDBY_PLAYERS).set(players as f64);
        let status = if ready {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.health.set_service_status(STANDBY, status).await;
    }

    /// How many shards other than `index` this node owns.
    fn others_owned(&self, index: usize) -> usize {
        let owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
        owned
            .iter()
            .enumerate()
            .filter(|(i, q)| *i != index && q.is_some())
            .count()
    }

    /// Member `index` owns `queues` queues now. The node's [`m::CLUSTER_QUEUES_OWNED`] is the
    /// sum over its members, which is why no gauge counts the shards it owns.
    /// Member `index` holds its shard's lease, with these queues (`None`: it does not).
    fn set_owned(&self, index: usize, queues: Option<usize>) {
        let mut owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
        owned[index] = queues;
        let total: usize = owned.iter().flatten().sum();
        metrics::gauge!(m::CLUSTER_QUEUES_OWNED).set(total as f64);
    }
}

/// The engine while this node owns the queues.
struct Running {
    owner: Owner,
    ownership: Arc<Ownership>,
    stop: CancellationToken,
    task: JoinHandle<()>,
    /// The engine's store, once opened: it stops writing when the lease is lost.
    store: Arc<std::sync::OnceLock<Arc<RedisStore>>>,
}

impl Member {
    /// Takes the lease when it is free and renews it while held; starts the engine on taking it
    /// and stops it on losing it. On `stop`, stops the engine (renewing meanwhile, so its last
    /// writes are accepted), then releases the lease.
    pub(super) async fn hold_lease(self: Arc<Self>, stop: CancellationToken) {
        let every = lease::renew_every(self.lease_time);
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut running: Option<Running> = None;
        // How many tries in a row this node saw the lease free and let it be.
        let mut free_seen = 0u32;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            let hand_over = self.handover.swap(false, Ordering::Relaxed);
            running = match running.take() {
                None if self.asked.is_cancelled() => None,
                // The engine stopped on its own (its store failed) and winds down: it serves
                // nothing from now, and the lease goes, rather than after its wind-down.
                Some(r) if r.stop.is_cancelled() => {
                    self.engine_stopped(&r, every).await;
                    None
                }
                Some(r) if hand_over => {
                    info!(
                        token = r.owner.token,
                        "handing the shard over to another node"
                    );
                    *self.handed_over.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(Instant::now());
                    self.wind_down(r, &mut ticker).await;
                    free_seen = 0;
                    None
                }
                Some(r) => self.renew(r, every).await,
                None => {
                    let hold_back = self.hold_back();
                    if !self.defers() && hold_back == 0 {
                        free_seen = 0;
                        self.try_acquire(every).await
                    } else {
                        match self.free_lease(every).await {
                            Some(warm) => {
                                // A node with a copy takes over faster.
                                // At most two tries in all: a dead owner's shard is still
                                // taken within 2 x lease_ms.
                                let wait =
                                    (hold_back + u32::from(self.defers() && warm > 0)).min(2);
                                if free_seen >= wait {
                                    free_seen = 0;
                                    self.try_acquire(every).await
                                } else {
                                    if free_seen == 0 && hold_back == 0 {
                                        info!(
                                            warm,
                                            "the lease is free; a node with a standby copy may take it first"
                                        );
                                    } else if free_seen == 0 {
                                        info!(
                                            warm,
                                            tries = wait,
                                            "the lease is free; a node with fewer shards may take it first"
                                        );
                                    }
                                    free_seen += 1;
                                    None
                                }
                            }
                            None => {
                                free_seen = 0;
                                // Another node took the shard handed over: should it die, this
                                // node takes the shard back as fast as any.
                                let taken = self
                                    .route
                                    .borrow()
                                    .owner
                                    .as_ref()
                                    .is_some_and(|o| o.node_id != self.node_id);
                                if taken {
                                    *self.handed_over.lock().unwrap_or_else(|p| p.into_inner()) =
                                        None;
                                }
                                None
                            }
                        }
                    }
                }
            };
        }
        if let Some(r) = running {
            self.wind_down(r, &mut ticker).await;
        }
    }

    /// Stops the engine (renewing the lease meanwhile, so its last writes are accepted), then
    /// releases the lease so another node takes the shard at once.
    async fn wind_down(&self, mut r: Running, ticker: &mut tokio::time::Interval) {
        let every = lease::renew_every(self.lease_time);
        r.stop.cancel();
        // Nothing calls the engine any more, and the services it holds keep the result
        // journal open, which the engine waits for as it stops.
        self.route.send_modify(|route| route.engine = None);
        loop {
            tokio::select! {
                _ = &mut r.task => break,
                _ = ticker.tick() => {
                    let Some(renewed) = self.renew(r, every).await else {
                        return;
                    };
                    r = renewed;
                }
            }
        }
        match self.lease.release(&r.owner).await {
            Ok(true) => info!(token = r.owner.token, "lease released"),
            Ok(false) => warn!("the lease had already passed to another node"),
            Err(e) => warn!(error = %e, "could not release the lease; it expires on its own"),
        }
        self.route.send_if_modified(|route| {
            let ours = route.owner.as_ref() == Some(&r.owner);
            if ours {
                route.owner = None;
            }
            ours
        });
        self.together.set_owned(self.index, None);
    }

    /// Asks the lease task to hand the shard over at its next try (see `balance`).
    pub(super) fn hand_over(&self) {
        self.handover.store(true, Ordering::Relaxed);
    }

    /// How many more tries this node lets a free lease pass before it takes it: one for each
    /// other shard it owns (at most two, so a dead owner's shard is still taken within two
    /// leases), and four for two leases after it handed this shard over (so another node
    /// takes it).
    fn hold_back(&self) -> u32 {
        let handed_over = self
            .handed_over
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < self.lease_time * 2);
        if handed_over {
            return 4;
        }
        self.together.others_owned(self.index).min(2) as u32
    }

    /// Whether this node lets others take a free lease first: it keeps standby copies but holds
    /// none now (it started less than a lease ago, or its copy fell out of step), so a node
    /// holding one takes over faster. When some node says it holds one
    /// ([`LeaseClient::mark_warm`]), it takes the lease only if it still finds it free at its
    /// next try, a quarter lease later: by then every node with a copy has tried.
    fn defers(&self) -> bool {
        self.standby.is_some() && !self.warm.load(Ordering::Relaxed)
    }

    /// Looks at the lease without taking it (see [`Member::defers`]): when it is free, how many
    /// nodes hold a current copy; `None` when it is held or paused, or Redis did not answer.
    async fn free_lease(&self, within: Duration) -> Option<u64> {
        let sent = Instant::now();
        let peeked = tokio::time::timeout(within, self.lease.peek()).await;
        record_round_trip(sent);
        match peeked {
            Ok(Ok((owner, warm, paused))) => {
                let free = owner.is_none() && !paused;
                self.seen_owner(owner).await;
                free.then_some(warm)
            }
            Ok(Err(e)) => lease_request_failed(Some(&e)),
            Err(_) => lease_request_failed(None),
        }
    }

    /// Records whether this node holds a current standby copy, here and in Redis (for the
    /// others' [`Member::defers`]): warm nodes say so again every quarter lease, since each
    /// entry lapses after a lease.
    async fn set_warm(&self, warm: bool, said: &mut Option<Instant>) {
        let was = self.warm.swap(warm, Ordering::Relaxed);
        let due = said.is_none_or(|at| at.elapsed() >= lease::renew_every(self.lease_time));
        if warm && (!was || due) {
            match self.lease.mark_warm(&self.node_id).await {
                Ok(()) => *said = Some(Instant::now()),
                Err(e) => warn!(error = %e, "cannot record the standby copy in Redis"),
            }
        } else if !warm && (was || said.is_some()) {
            *said = None;
            if let Err(e) = self.lease.mark_cold(&self.node_id).await {
                warn!(error = %e, "cannot record in Redis that the standby copy is gone");
            }
        }
    }

    /// Records `owner`, the lease's holder as Redis names it while this node runs no engine.
    /// A lease naming this node then is one it does not know it holds: an acquisition or
    /// renewal Redis ran after this node stopped waiting for its answer, or one an earlier run
    /// of this node (same `node_id`) left. It is given up, so that the queues move on at the
    /// next try rather than when it expires, and no write is accepted under its token.
    async fn seen_owner(&self, owner: Option<Owner>) {
        let owner = match owner {
            Some(mine) if mine.node_id == self.node_id => {
                warn!(
                    token = mine.token,
                    "the lease names this node, which runs no engine under it; giving it up"
                );
                if let Err(e) = self.lease.release(&mine).await {
                    warn!(error = %e, "could not give the lease up; it expires on its own");
                }
                None
            }
            other => other,
        };
        self.route.send_if_modified(|route| {
            let changed = route.owner != owner;
            route.owner = owner;
            changed
        });
    }

    async fn try_acquire(&self, within: Duration) -> Option<Running> {
        let sent = Instant::now();
        let acquired =
            tokio::time::timeout(within, self.lease.acquire(&self.node_id, &self.advertise)).await;
        record_round_trip(sent);
        match acquired {
            Ok(Ok(Acquired::Mine(owner))) => {
                let ownership = Arc::new(Ownership::stopping_with(&self.stopping));
                ownership.extend(lease::valid_until(sent, self.lease_time));
                metrics::counter!(m::CLUSTER_LEASE_ACQUIRED).increment(1);
                self.together
                    .set_owned(self.index, Some(self.config.queues.len()));
                info!(token = owner.token, "this node owns the queues now");
                self.route.send_modify(|route| {
                    route.owner = Some(owner.clone());
                    route.engine = None;
                });
                Some(self.start_engine(owner, ownership))
            }
            Ok(Ok(Acquired::Theirs(owner))) => {
                self.seen_owner(owner).await;
                None
            }
            // Owners' stores failed: nobody takes the queues until the pause ends.
            Ok(Ok(Acquired::Paused(_))) => {
                self.seen_owner(None).await;
                None
            }
            Ok(Err(e)) => lease_request_failed(Some(&e)),
            Err(_) => lease_request_failed(None),
        }
    }

    /// The engine stopped on its own (its store failed): calls go to the next owner at once,
    /// and the lease is given up so that another node takes over (its writes, and any the
    /// stopping engine still tries, are fenced by then), after a pause when owners' stores
    /// failed before in a row (see `lease`).
    async fn engine_stopped(&self, r: &Running, within: Duration) {
        warn!("the engine stopped; giving the lease up");
        self.lost(r);
        match tokio::time::timeout(within, self.lease.give_up(&r.owner)).await {
            Ok(Ok(lease::GaveUp::Paused { stops, pause })) if !pause.is_zero() => warn!(
                stops,
                pause_ms = pause.as_millis() as u64,
                "owners' stores failed in a row: no node takes the queues until the pause ends"
            ),
            Ok(Ok(_)) => {}
            _ => warn!("could not give the lease up; it expires on its own"),
        }
    }

    async fn renew(&self, r: Running, within: Duration) -> Option<Running> {
        if r.task.is_finished() {
            self.engine_stopped(&r, within).await;
            return None;
        }
        let sent = Instant::now();
        let renewed = tokio::time::timeout(within, self.lease.renew(&r.owner)).await;
        record_round_trip(sent);
        match renewed {
            Ok(Ok(true)) => {
                r.ownership
                    .extend(lease::valid_until(sent, self.lease_time));
                metrics::counter!(m::CLUSTER_LEASE_RENEWALS).increment(1);
                Some(r)
            }
            Ok(Ok(false)) => {
                warn!(token = r.owner.token, "the lease passed to another node");
                self.lost(&r);
                None
            }
            Ok(Err(_)) | Err(_) if r.ownership.holds() => Some(r),
            Ok(Err(e)) => {
                warn!(error = %e, "lease not renewed in time");
                self.lost(&r);
                None
            }
            Err(_) => {
                warn!("lease not renewed in time (Redis did not answer)");
                self.lost(&r);
                None
            }
        }
    }

    /// Whether the lease names this node.
    fn owns(&self) -> bool {
        self.route
            .borrow()
            .owner
            .as_ref()
            .is_some_and(|o| o.node_id == self.node_id)
    }

    /// While another node owns the queues, keeps the standby copy of the state that a takeover
    /// starts from: read whole once, then following the owner's change log. A copy that falls
    /// out of step is read again, less often each time it happens again soon.
    pub(super) async fn keep_standby(self: Arc<Self>, stop: CancellationToken) {
        let Some(slot) = self.standby.clone() else {
            return;
        };
        let cluster = &self.config.cluster;
        let keys = cluster.keys();
        let follow_every = Duration::from_millis(250);
        // Nodes starting together first settle which one owns: the owner needs no copy.
        let mut wait = self.lease_time;
        let mut loaded = Instant::now();
        let mut misses = 0u32;
        // Loads failed in a row: each waits longer for the next.
        let mut load_failures = 0u32;
        let mut said = None;
        loop {
            tokio::select! {
                () = stop.cancelled() => {
                    self.set_warm(false, &mut said).await;
                    return;
                }
                () = self.asked.cancelled() => {
                    self.set_warm(false, &mut said).await;
                    if !self.owns() {
                        self.together.report(self.index, Warmth::Cold).await;
                    }
                    return;
                }
                () = tokio::time::sleep(wait) => {}
            }
            wait = follow_every;
            if self.owns() {
                slot.lock().await.take();
                self.set_warm(false, &mut said).await;
                self.together.report(self.index, Warmth::Owner).await;
                continue;
            }
            let mut copy = slot.lock().await;
            let Some(standby) = copy.as_mut() else {
                drop(copy);
                // Not if the lease came meanwhile: the owner's status is its own.
                if !self.owns() {
                    self.together.report(self.index, Warmth::Cold).await;
                }
                let started = Instant::now();
                let load = Standby::load(
                    &cluster.redis_url,
                    self.redis_tls.as_ref(),
                    &keys,
                    Patience::for_lease(self.lease_time),
                );
                // A node asked to stop does not wait for a load (seconds per million players).
                let loaded_copy = tokio::select! {
                    r = load => r,
                    () = self.asked.cancelled() => return,
                    () = stop.cancelled() => return,
                };
                match loaded_copy {
                    Ok(standby) if !self.owns() => {
                        let players = standby.player_count();
                        info!(
                            players,
                            seconds = started.elapsed().as_secs_f64(),
                            "standby copy loaded"
                        );
                        load_failures = 0;
                        *slot.lock().await = Some(standby);
                        self.set_warm(true, &mut said).await;
                        self.together
                            .report(self.index, Warmth::Copy(players))
                            .await;
                        loaded = Instant::now();
                    }
                    Ok(_) => {}
                    Err(e) => {
                        load_failures += 1;
                        wait = lease::retry_after(self.lease_time, load_failures, rand::random());
                        warn!(
                            error = %e,
                            retry_in_ms = wait.as_millis() as u64,
                            "cannot load a standby copy"
                        );
                    }
                }
                continue;
            };
            let sent = Instant::now();
            let followed = standby.follow().await;
            metrics::histogram!(m::CLUSTER_REDIS_SECONDS, "op" => "follow")
                .record(sent.elapsed().as_secs_f64());
            let why = match followed {
                Ok(Followed::InStep) => {
                    self.together
                        .copy_players(self.index, standby.player_count());
                    drop(copy);
                    self.set_warm(true, &mut said).await;
                    continue;
                }
                Ok(Followed::Gap) => "it missed a change".to_string(),
                Err(e) => e.to_string(),
            };
            *copy = None;
            drop(copy);
            self.set_warm(false, &mut said).await;
            self.together.report(self.index, Warmth::Cold).await;
            misses = if loaded.elapsed() < Duration::from_secs(60) {
                (misses + 1).min(6)
            } else {
                0
            };
            wait = self.lease_time * (1 << misses);
            warn!(
                reason = %why,
                retry_in_ms = wait.as_millis() as u64,
                "the standby copy fell out of step; reading it again"
            );
        }
    }

    /// Stops acting at once; the engine winds down in the background (its writes are fenced).
    fn lost(&self, r: &Running) {
        r.ownership.revoke();
        r.stop.cancel();
        // After both: an engine that opens its store meanwhile sees them (`start_engine`).
        if let Some(store) = r.store.get() {
            store.stop_writing();
        }
        metrics::counter!(m::CLUSTER_LEASE_LOSSES).increment(1);
        // The engine's gauges count what the next owner counts now (again at the engine's
        // end, after the last of its wind-down). This shard's only: the node's other engines
        // carry on.
        engine_stopped(&self.config);
        self.together.set_owned(self.index, None);
        self.route.send_modify(|route| {
            route.engine = None;
            if route.owner.as_ref() == Some(&r.owner) {
                route.owner = None;
            }
        });
        if self.standby.is_some() {
            // The engine took the copy: none until the standby task reads one again (which,
            // after the copy fell out of step, can be many leases away).
            let (together, index) = (self.together.clone(), self.index);
            tokio::spawn(async move { together.report(index, Warmth::Cold).await });
        }
    }

    /// Opens the store under `owner`'s token and runs the engine; the front calls it in process
    /// once its state is loaded.
    fn start_engine(&self, owner: Owner, ownership: Arc<Ownership>) -> Running {
        let stop = CancellationToken::new();
        let config = engine_config(&self.config);
        let cluster = self.config.cluster.clone();
        let route = self.route.clone();
        let token = owner.token;
        let node_id = owner.node_id.clone();
        let this_node = owner.node_id.clone();
        let tls = self.redis_tls.clone();
        let standby = self.standby.clone();
        // The engine takes the copy.
        self.warm.store(false, Ordering::Relaxed);
        let (together, index) = (self.together.clone(), self.index);
        let verifier = self.verifier.clone();
        let shard_config = self.config.clone();
        let opened_store = Arc::new(std::sync::OnceLock::new());
        let task = tokio::spawn({
            let ownership = ownership.clone();
            let stop = stop.clone();
            let opened_store = opened_store.clone();
            async move {
                let options = RedisOptions {
                    wait_replicas: cluster.wait_replicas,
                    wait_timeout_ms: cluster.wait_timeout_ms,
                    tls,
                    keys: cluster.keys(),
                    change_log: cluster.standby,
                    patience: Patience::for_lease(Duration::from_millis(cluster.lease_ms)),
                    node: node_id,
                };
                let started = Instant::now();
                let copy = match &standby {
                    Some(slot) => slot.lock().await.take(),
                    None => None,
                };
                if standby.is_some() {
                    together.report(index, Warmth::Owner).await;
                }
                let opened = tokio::select! {
                    r = RedisStore::open_from(&cluster.redis_url, token, &options, copy) => r,
                    () = stop.cancelled() => return,
                };
                let store = match opened {
                    Ok(s) => {
                        info!(
                            players = s.player_count(),
                            seconds = started.elapsed().as_secs_f64(),
                            "cluster store loaded"
                        );
                        s
                    }
                    Err(e) => {
                        error!(error = %e, "cannot open the cluster store");
                        return;
                    }
                };
                let redis = Arc::new(store);
                if !cluster.claims.is_empty() {
                    redis.claim_across(&cluster.claims);
                }
                let _ = opened_store.set(redis.clone());
                if stop.is_cancelled() && !ownership.holds() {
                    // The lease was lost while the store opened.
                    redis.stop_writing();
                }
                // A keyspace of an earlier release gets its past indexes while the engine
                // serves (a large history takes a while); erasures are refused until then.
                tokio::spawn(build_past_indexes(redis.clone(), stop.clone()));
                let store: Store = redis;
                let after = route.clone();
                let publish: server::Publish = Box::new(move |engine| {
                    route.send_modify(|r| {
                        if r.owner.as_ref().is_some_and(|o| o.token == token) {
                            r.engine = Some(engine);
                        }
                    });
                });
                // The newest queue settings a reload could apply: the last reload an owner
                // accepted (kept in Redis) or the file as it is now.
                let reloaded = store.reloaded_queues();
                let store_ahead = store.now_unix() - crate::state::unix_now();
                let config =
                    crate::reload::with_current_queues(config, reloaded.as_ref(), store_ahead);
                if let Err(e) =
                    server::run_engine(config, verifier, store, ownership, publish, stop).await
                {
                    warn!(error = %e, "the engine stopped");
                }
                // Its gauges go to zero, unless this node took the lease again meanwhile and
                // a newer engine keeps them.
                let newer = after
                    .borrow()
                    .owner
                    .as_ref()
                    .is_some_and(|o| o.node_id == this_node && o.token != token);
                if !newer {
                    engine_stopped(&shard_config);
                }
            }
        });
        Running {
            owner,
            ownership,
            stop,
            task,
            store: opened_store,
        }
    }
}

/// Builds the match history's past indexes of a keyspace an earlier release wrote (see
/// `RedisStore::build_past_indexes`), trying again every 10 s after a failure, until done or
/// `stop` (the engine stops: the next owner carries on from the saved cursor).
async fn build_past_indexes(store: Arc<RedisStore>, stop: CancellationToken) {
    let building = Instant::now();
    loop {
        let built = tokio::select! {
            r = store.build_past_indexes() => r,
            () = stop.cancelled() => return,
        };
        match built {
            Ok(Some(entries)) => {
                info!(
                    entries,
                    seconds = building.elapsed().as_secs_f64(),
                    "built the match history's past indexes"
                );
                return;
            }
            Ok(None) => return,
            Err(crate::store::StoreError::Fenced) => return,
            Err(e @ crate::store::StoreError::Decode { .. }) => {
                // Trying again reads the same record: an operator must mend or remove it.
                error!(error = %e, "cannot build the match history's past indexes; erasures are refused until a record that decodes is there");
                return;
            }
            Err(e) => {
                warn!(error = %e, "cannot build the match history's past indexes yet; erasures wait for them");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(10)) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// The health service that tells whether a node could carry on the queues without reading
/// everything: SERVING while, for every shard, it owns it or holds a current standby copy. A rolling restart
/// that waits for it on each restarted node (a startup probe) never stops a node while no other
/// is ready to take over from a copy. With `standby = false` it is always SERVING: there is no
/// copy to wait for.
pub const STANDBY: &str = "standby";

/// Where a node stands for a takeover.
enum Warmth {
    /// It owns the queues.
    Owner,
    /// It holds a current copy of this many players.
    Copy(usize),
    /// It has no copy (yet).
    Cold,
}

/// Logs why a lease request got no answer: Redis' error, or none in time (`None`).
fn lease_request_failed<T>(error: Option<&lease::LeaseError>) -> Option<T> {
    match error {
        Some(e) => warn!(error = %e, "cannot reach Redis for the lease"),
        None => warn!("Redis did not answer the lease request in time"),
    }
    None
}

fn record_round_trip(sent: Instant) {
    metrics::histogram!(m::CLUSTER_REDIS_SECONDS, "op" => "lease")
        .record(sent.elapsed().as_secs_f64());
}

/// Zeroes the gauges of the engine of the shard `config` describes: its keyspace's, and its
/// queues' (which a reload cannot change, so they are every queue its engine gauged).
fn engine_stopped(config: &Config) {
    m::engine_stopped(
        &config.cluster.keyspace,
        config.queues.keys().map(String::as_str),
    );
}

/// The engine serves only its node's front, in process: no TLS, grpc-web, CORS or metrics
/// endpoint of its own, and it stops at once when told.
pub(super) fn engine_config(config: &Config) -> Config {
    let mut c = config.clone();
    c.server.metrics_addr = String::new();
    c.server.drain_ms = 0;
    c.server.grpc_web = false;
    c.server.grpc_web_origins = Vec::new();
    c.tls.enabled = false;
    c
}
