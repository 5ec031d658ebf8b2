//! A config reload inside the loop: each named queue's pool is rebuilt under its new matching
//! settings with every waiting ticket (waits kept); if any ticket does not fit, nothing changes.
//! Only then do the loop's other per-queue settings and the state's queue configs change, so
//! the API and the optimizer switch together, between two ticks.

use super::Loop;
use crate::config::QueueConfig;
use crate::ids::QueueId;

impl Loop {
    pub(super) fn reconfigure(&mut self, queues: &[(QueueId, QueueConfig)]) -> Result<(), String> {
        let mut rebuilt = Vec::with_capacity(queues.len());
        for (id, config) in queues {
            let Some(&qi) = self.queue_index.get(id) else {
                return Err(format!("queue {id} is not running"));
            };
            let pool = self.queues[qi]
                .pool
                .with_config(config.matching.clone())
                .map_err(|e| {
                    format!("queue {id}: a waiting ticket does not fit the new settings ({e})")
                })?;
            rebuilt.push((qi, pool, config));
        }
        for (qi, pool, config) in rebuilt {
            let q = &mut self.queues[qi];
            q.pool = pool;
            q.ready_check_seconds = config.ready_check_seconds;
            q.backfill = config.backfill.clone();
        }
        self.state.replace_queue_configs(queues);
        Ok(())
    }
}
