//! Sending queued batches: one flight at a time, in as few scripts as the batches allow, each
//! fenced by the lease's token (see the module documentation and the script's).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::script::{ChangeList, Invocation, Run, runs};
use super::{
    CHANGE_LOG_ENTRIES, HASHES, Hash, Op, RedisStore, StoreError, fence, redact, redis_error, stage,
};

impl RedisStore {
    /// Sends every queued batch (one script) unless a flight already made batch `target`
    /// durable.
    pub(super) async fn flush_through(&self, target: u64) -> Result<(), StoreError> {
        if self.flushed.load(Ordering::Acquire) >= target {
            return self.check_fence();
        }
        let seen = self.failed_flights();
        let _flight = self.flight.lock().await;
        if self.flushed.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        self.check_fence()?;
        // After a failed flight the next waits (see `backlog.rs`); batches queued meanwhile go
        // with it.
        if let Some(at) = self.next_flight(seen, target)? {
            tokio::time::sleep_until(at.into()).await;
            self.check_fence()?;
        }
        let (batches, upto) = {
            let mut pending = self.pending();
            pending.bytes = 0;
            (std::mem::take(&mut pending.batches), pending.queued)
        };
        if batches.is_empty() {
            self.flushed.store(upto, Ordering::Release);
            return Ok(());
        }
        // Until the flight is known applied, its batches go back in front of the queue if this
        // future fails or is dropped (a caller that gave up): a later flush sends them again,
        // in order, and whole-value writes applied twice leave the same result (a flight whose
        // script ran but whose `WAIT` fell short too: see `backlog.rs`). Those known
        // applied do not: sent again, an earlier batch would write its older values over a
        // later one's that a staged write had committed (see `stage.rs`).
        let mut flight = Flight {
            store: self,
            batches: Some(batches),
            applied: AtomicUsize::new(0),
        };
        let started = Instant::now();
        let sent = self.send(flight.batches(), &flight.applied).await;
        metrics::histogram!(crate::telemetry::CLUSTER_REDIS_SECONDS, "op" => "flush")
            .record(started.elapsed().as_secs_f64());
        match sent {
            Ok(()) => {
                flight.batches = None;
                self.flushed.store(upto, Ordering::Release);
                self.flight_landed();
                Ok(())
            }
            Err(StoreError::Fenced) => {
                flight.batches = None;
                Err(StoreError::Fenced)
            }
            Err(e) => {
                // Back in front of the queue first, so the bound counts them.
                drop(flight);
                self.flight_failed(upto, &e);
                Err(e)
            }
        }
    }

    /// Sends `batches` in as few scripts as keep each under [`MAX_SCRIPT_ARGS`] arguments; a
    /// batch is never split, so each stays atomic (one too large for a script is written in
    /// parts and committed whole: see `stage.rs`).
    /// `applied` counts the batches known applied, a prefix.
    pub(super) async fn send(
        &self,
        batches: &[Vec<Op>],
        applied: &AtomicUsize,
    ) -> Result<(), StoreError> {
        let mut start = 0;
        while start < batches.len() {
            if self.staged(&batches[start]) {
                self.send_staged(&batches[start]).await?;
                start += 1;
                applied.store(start, Ordering::Release);
                continue;
            }
            let mut end = start;
            let mut args = 0;
            let size = |b: &Vec<Op>| b.iter().map(Op::args).sum::<usize>();
            while end < batches.len()
                && !self.staged(&batches[end])
                && (end == start || args + size(&batches[end]) <= MAX_SCRIPT_ARGS)
            {
                args += size(&batches[end]);
                end += 1;
            }
            self.send_script(&batches[start..end]).await?;
            start = end;
            applied.store(start, Ordering::Release);
        }
        Ok(())
    }

    pub(super) async fn send_script(&self, batches: &[Vec<Op>]) -> Result<(), StoreError> {
        self.send_call(batches, self.calls.fetch_add(1, Ordering::Relaxed))
            .await
    }

    /// Sends `batches` as call number `call` of this store's (see the flush's script).
    pub(super) async fn send_call(&self, batches: &[Vec<Op>], call: u64) -> Result<(), StoreError> {
        let mut invocation = Invocation::default();
        invocation.key(self.keys.lease());
        for (_, name) in self.keys.hashes() {
            invocation.key(name);
        }
        invocation
            .key(self.keys.changes())
            .key(self.keys.change_seq())
            .key(self.keys.flight());
        // History lists and past indexes are keys of their own (same slot), declared after
        // those.
        let mut lists: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for key in batches.iter().flatten().flat_map(Op::own_keys) {
            if !lists.contains_key(key) {
                lists.insert(key, 5 + HASHES.len() + lists.len());
                invocation.key(key);
            }
        }
        invocation
            .arg(fence(self.token, &self.options.node))
            .arg(if self.options.change_log {
                CHANGE_LOG_ENTRIES
            } else {
                0
            })
            .arg(call);
        let runs = runs(batches.iter().flatten());
        let (what, changes) = if self.options.change_log {
            let mut list = ChangeList::default();
            for run in &runs {
                match run {
                    Run::Set(h, fields) => fields.iter().for_each(|(f, _)| list.field(*h, f)),
                    Run::Del(h, fields) => fields.iter().for_each(|f| list.field(*h, f)),
                    Run::One(Op::Set(h, f, _) | Op::Del(h, f)) => list.field(*h, f),
                    Run::One(Op::Clear(h)) => list.cleared(*h),
                    Run::One(Op::Move(_, fields)) => stage::note_moved(&mut list, fields),
                    Run::One(_) => {}
                }
            }
            list.into_entry()
        } else {
            ("c", Vec::new())
        };
        invocation
            .arg(what)
            .arg(changes)
            .arg(self.keys.past_prefix());
        for run in runs {
            let op = match run {
                Run::Set(h, fields) => {
                    invocation.arg("s").arg(h as usize).arg(fields.len());
                    for (field, value) in fields {
                        invocation.arg(field).arg(value);
                    }
                    continue;
                }
                Run::Del(h, fields) => {
                    invocation
                        .arg("d")
                        .arg(h as usize)
                        .arg(fields.len())
                        .arg(fields);
                    continue;
                }
                Run::One(op) => op,
            };
            match op {
                Op::Push {
                    list,
                    past,
                    member,
                    keep,
                } => {
                    invocation
                        .arg("p")
                        .arg(lists[list.as_str()])
                        .arg(member)
                        .arg(*keep)
                        .arg(Hash::MatchRecords as usize)
                        .arg(Hash::MatchRefs as usize)
                        .arg(lists[past.as_str()]);
                }
                Op::Index { past, list, member } => {
                    invocation
                        .arg("a")
                        .arg(lists[past.as_str()])
                        .arg(lists[list.as_str()])
                        .arg(member)
                        .arg(Hash::MatchRecords as usize);
                }
                Op::List(key, members) | Op::Past(key, members) => {
                    let op = if matches!(op, Op::List(..)) { "l" } else { "t" };
                    invocation
                        .arg(op)
                        .arg(lists[key.as_str()])
                        .arg(members.len())
                        .arg(members);
                }
                Op::Forget(past, member, value) => {
                    invocation
                        .arg("f")
                        .arg(lists[past.as_str()])
                        .arg(member)
                        .arg(Hash::MatchRecords as usize)
                        .arg(value);
                }
                Op::Unhold(list, member, value) => {
                    invocation
                        .arg("u")
                        .arg(lists[list.as_str()])
                        .arg(member)
                        .arg(Hash::MatchRecords as usize)
                        .arg(Hash::MatchRefs as usize)
                        .arg(value);
                }
                // `runs` groups every set and delete; one alone is a run of one.
                Op::Set(h, field, value) => {
                    invocation
                        .arg("s")
                        .arg(*h as usize)
                        .arg(1)
                        .arg(field)
                        .arg(value);
                }
                Op::Del(h, field) => {
                    invocation.arg("d").arg(*h as usize).arg(1).arg(field);
                }
                Op::Clear(h) => {
                    invocation.arg("x").arg(*h as usize);
                }
                Op::Commit { stage, id, count } => {
                    invocation
                        .arg("c")
                        .arg(lists[stage.as_str()])
                        .arg(id)
                        .arg(*count)
                        .arg(Hash::Meta as usize);
                }
                Op::Move(stage, fields) => {
                    invocation
                        .arg("g")
                        .arg(lists[stage.as_str()])
                        .arg(fields.len())
                        .arg(fields);
                }
                Op::Unstage(stage) => {
                    invocation
                        .arg("e")
                        .arg(lists[stage.as_str()])
                        .arg(Hash::Meta as usize);
                }
            }
        }
        self.run_script(&invocation.cmd(&self.apply)).await
    }

    /// Runs the flush's script; with `wait_replicas`, `WAIT` follows it in the same request on
    /// the same connection, so it counts the script's writes (`WAIT` counts the writes of its
    /// own connection: sent apart, after the client reconnected or the sentinels named another
    /// primary, it would acknowledge writes no replica holds). A Redis that lost the script
    /// (`NOSCRIPT`: restarted, or a new primary) gets it loaded and the call made again.
    /// The script's answer carries Redis's clock, which the store takes as its newest reading.
    pub(super) async fn run_script(&self, script: &::redis::Cmd) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let mut loaded = false;
        loop {
            let sent = Instant::now();
            let reply = match self.options.wait_replicas {
                0 => script
                    .query_async::<::redis::Value>(&mut conn)
                    .await
                    .map(|applied| {
                        self.note_time(applied, sent);
                        None
                    }),
                replicas => {
                    let mut pipe = ::redis::pipe();
                    pipe.add_command(script.clone())
                        .cmd("WAIT")
                        .arg(replicas)
                        .arg(self.options.wait_timeout_ms);
                    conn.pipeline_on_primary_of(self.keys.lease(), &pipe, 2)
                        .await
                        .and_then(|replies| {
                            let mut replies = replies.into_iter();
                            let applied = replies.next().map(|v| v.extract_error());
                            let acked = replies.next().map(|v| v.extract_error());
                            match (applied, acked) {
                                (Some(Err(e)), _) | (_, Some(Err(e))) => Err(e),
                                (Some(Ok(applied)), Some(Ok(acked))) => {
                                    self.note_time(applied, sent);
                                    ::redis::from_redis_value::<i64>(acked)
                                        .map(Some)
                                        .map_err(Into::into)
                                }
                                _ => Err(::redis::RedisError::from((
                                    ::redis::ErrorKind::UnexpectedReturnType,
                                    "a flush and its WAIT got fewer than two replies",
                                ))),
                            }
                        })
                }
            };
            let e = match reply {
                Ok(acked) => return self.acknowledged(acked),
                Err(e) => e,
            };
            if e.kind() == ::redis::ErrorKind::Server(::redis::ServerErrorKind::NoScript) && !loaded
            {
                loaded = true;
                self.apply
                    .load_async(&mut conn)
                    .await
                    .map_err(redis_error(&self.url))?;
                continue;
            }
            if e.to_string().contains("FENCED") {
                self.fenced.store(true, Ordering::Release);
                tracing::warn!(
                    token = self.token,
                    "store fenced: another node owns the queues"
                );
                return Err(StoreError::Fenced);
            }
            return Err(redis_error(&self.url)(e));
        }
    }

    /// Takes Redis's clock from the script's answer (`{N, SECONDS, MICROSECONDS}`) to a call
    /// sent at `sent`; an answer without it leaves the reading as it was.
    fn note_time(&self, applied: ::redis::Value, sent: Instant) {
        if let Ok((_, seconds, micros)) = ::redis::from_redis_value::<(u64, u64, u64)>(applied) {
            self.clock.read((seconds, micros), sent);
        }
    }

    /// Whether `acked` replicas (from `WAIT`; `None` without `wait_replicas`) are enough.
    pub(super) fn acknowledged(&self, acked: Option<i64>) -> Result<(), StoreError> {
        match acked {
            Some(acked) if acked < i64::from(self.options.wait_replicas) => {
                Err(StoreError::Redis(format!(
                    "{}: {acked} of {} replicas acknowledged within {} ms",
                    redact(&self.url),
                    self.options.wait_replicas,
                    self.options.wait_timeout_ms
                )))
            }
            _ => Ok(()),
        }
    }
}

/// Most arguments one script gets (a snapshot of many players is sent in several).
const MAX_SCRIPT_ARGS: usize = 200_000;

/// Batches being sent; back in front of the queue unless the send is known applied.
struct Flight<'a> {
    store: &'a RedisStore,
    batches: Option<Vec<Vec<Op>>>,
    /// How many of them (from the first) are known applied.
    applied: AtomicUsize,
}

impl Flight<'_> {
    fn batches(&self) -> &[Vec<Op>] {
        self.batches.as_deref().unwrap_or(&[])
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        if let Some(mut batches) = self.batches.take() {
            if self.store.gave_up.get().is_some() {
                // Nothing is written any more.
                return;
            }
            let applied = self.applied.load(Ordering::Acquire).min(batches.len());
            batches.drain(..applied);
            let bytes: usize = batches.iter().map(|b| super::backlog::batch_bytes(b)).sum();
            let mut pending = self.store.pending();
            let later = std::mem::take(&mut pending.batches);
            pending.batches = batches;
            pending.batches.extend(later);
            pending.bytes += bytes;
        }
    }
}
