//! What a call admitted in Redis holds ([`RedisHeld`]) and how it settles: the settlement
//! script, many settlements per call while the node is busy ([`SETTLE_MANY`]), and the
//! adjuster that lowers one reservation at once ([`RedisAdjuster`]). The admission itself is
//! [`crate::governance::redis_counters`]'; this part sits below the reservations that hold it.

use crate::redis_link::RedisLink;
use std::sync::Arc;

/// Settlements, many in one call. For each settlement `i` (from 0): KEYS[2i+1] its budget
/// counter, KEYS[2i+2] its rate window; ARGV[7i+1..7i+7]: `1` with a budget, the generation
/// reserved against, real cost minus reservation, real cost, `1` with a rate window, real
/// tokens minus reserved, requests given back (a lease's unused ones, negative). A counter
/// reopened since the reservation (another generation) did not count it: it gets the real
/// cost. Missing counters stay missing; nothing goes below 0.
pub(super) const SETTLE_MANY: &str = r"
for i = 0, #KEYS / 2 - 1 do
  local budget, window = KEYS[2 * i + 1], KEYS[2 * i + 2]
  local a = 7 * i
  if ARGV[a + 1] == '1' then
    local g = redis.call('HGET', budget, 'g')
    if g then
      local add = ARGV[a + 3]
      if g ~= ARGV[a + 2] then
        add = ARGV[a + 4]
      end
      if redis.call('HINCRBY', budget, 'c', add) < 0 then
        redis.call('HSET', budget, 'c', 0)
      end
    end
  end
  if ARGV[a + 5] == '1' and redis.call('EXISTS', window) == 1 then
    if ARGV[a + 6] ~= '0' and redis.call('HINCRBY', window, 't', ARGV[a + 6]) < 0 then
      redis.call('HSET', window, 't', 0)
    end
    if ARGV[a + 7] ~= '0' and redis.call('HINCRBY', window, 'r', ARGV[a + 7]) < 0 then
      redis.call('HSET', window, 'r', 0)
    end
  end
end
return 1
";

/// Most settlements sent in one script call.
const SETTLEMENTS_PER_CALL: usize = 256;

/// One settlement waiting to be sent: the budget counter and rate window (names), and the
/// script's seven arguments.
#[derive(Debug)]
struct Settlement {
    budget_key: String,
    window_key: String,
    budget: bool,
    generation: String,
    delta: i64,
    cost: i64,
    window: bool,
    token_delta: i64,
    request_delta: i64,
}

/// The scripts and the connection (shared by clones).
pub(super) struct Scripts {
    pub(super) link: RedisLink,
    pub(super) admit: redis::Script,
    pub(super) open: redis::Script,
    /// Where settlements wait for the task that sends them ([`Scripts::settle`]), started on
    /// the first settlement.
    settlements: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Settlement>>,
}

impl Scripts {
    /// The scripts `admit` and `open` over `link`, with the settlement script of this file.
    pub(super) fn new(link: RedisLink, admit: redis::Script, open: redis::Script) -> Self {
        Self { link, admit, open, settlements: std::sync::OnceLock::new() }
    }

    /// Queues `settlement` for the sending task, which sends what waits in one script call
    /// ([`SETTLE_MANY`]) whenever it is not already waiting for one: a busy node sends one call
    /// for many settlements, an idle one a call per settlement at once. Nothing happens outside
    /// a tokio runtime.
    fn settle(&self, settlement: Settlement) {
        let sender = match self.settlements.get() {
            Some(sender) => sender,
            None => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                self.settlements.get_or_init(|| {
                    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                    runtime.spawn(send_settlements(self.link.clone(), rx));
                    tx
                })
            }
        };
        let _ = sender.send(settlement);
    }
}

/// The sending task of [`Scripts::settle`]; ends when the counters are gone.
async fn send_settlements(
    link: RedisLink,
    mut waiting: tokio::sync::mpsc::UnboundedReceiver<Settlement>,
) {
    let script = redis::Script::new(SETTLE_MANY);
    let mut batch = Vec::with_capacity(SETTLEMENTS_PER_CALL);
    while waiting.recv_many(&mut batch, SETTLEMENTS_PER_CALL).await > 0 {
        let mut invocation = script.prepare_invoke();
        for s in &batch {
            invocation.key(placeholder(&s.budget_key, &s.window_key));
            invocation.key(placeholder(&s.window_key, &s.budget_key));
            invocation.arg(flag(s.budget)).arg(&s.generation).arg(s.delta).arg(s.cost);
            invocation.arg(flag(s.window)).arg(s.token_delta).arg(s.request_delta);
        }
        if link.invoke::<i64>(&invocation).await.is_none() {
            tracing::warn!(
                settlements = batch.len(),
                "settlements in Redis failed; the reservations stay counted"
            );
        }
        batch.clear();
    }
}

/// What an admitted call holds in Redis, for its settlement.
#[derive(Debug)]
pub(crate) struct RedisHeld {
    pub(super) scripts: Arc<Scripts>,
    /// The budget counter and the generation reserved against.
    pub(super) budget: Option<(String, String)>,
    /// The rate window (with rate limits) and the worst-case tokens counted in it (with a
    /// `tpm_limit`).
    pub(super) window: Option<(String, Option<i64>)>,
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.link.fmt(f)
    }
}

/// Lowers one reservation in a Redis budget counter at once (see
/// [`crate::governance::reservation::Tightener`]).
#[derive(Debug)]
pub(crate) struct RedisAdjuster {
    scripts: Arc<Scripts>,
    budget_key: String,
    generation: String,
}

impl RedisAdjuster {
    /// Adds `delta` micro-USD to the budget counter now, unless it was reopened since the
    /// reservation (another generation: then nothing, as the reopened counter may not hold
    /// it); whether Redis answered.
    pub(crate) async fn adjust(&self, delta: i64) -> bool {
        let script = redis::Script::new(SETTLE_MANY);
        let mut invocation = script.prepare_invoke();
        invocation.key(&self.budget_key).key(&self.budget_key);
        invocation.arg(flag(true)).arg(&self.generation).arg(delta).arg(0);
        invocation.arg(flag(false)).arg(0).arg(0);
        self.scripts.link.invoke::<i64>(&invocation).await.is_some()
    }
}

impl RedisHeld {
    /// An adjuster of this reservation's budget counter; `None` without a budget.
    pub(crate) fn adjuster(&self) -> Option<RedisAdjuster> {
        let (budget_key, generation) = self.budget.clone()?;
        Some(RedisAdjuster { scripts: self.scripts.clone(), budget_key, generation })
    }

    /// Sends the settlement in the background: `delta` (real cost minus reservation) and
    /// `cost` micro-USD to the budget counter, the real `total_tokens` and `unused_requests`
    /// (a lease's, given back) to the window (batched with other settlements:
    /// [`Scripts::settle`]).
    pub(crate) fn settle(self, delta: i64, cost: i64, total_tokens: u64, unused_requests: i64) {
        let token_delta = self
            .window
            .as_ref()
            .and_then(|(_, reserved)| *reserved)
            .map_or(0, |r| i64::try_from(total_tokens).unwrap_or(i64::MAX) - r);
        let request_delta = if self.window.is_some() { -unused_requests.max(0) } else { 0 };
        // With a budget the script always runs, `delta` 0 or not: a counter reopened since
        // the reservation needs the real cost.
        if (self.budget.is_none() || (delta == 0 && cost == 0))
            && token_delta == 0
            && request_delta == 0
        {
            return;
        }
        let RedisHeld { scripts, budget, window } = self;
        let has_budget = budget.is_some();
        let (budget_key, generation) = budget.unwrap_or_default();
        let has_window = window.is_some();
        let window_key = window.map(|(key, _)| key).unwrap_or_default();
        scripts.settle(Settlement {
            budget_key,
            window_key,
            budget: has_budget,
            generation,
            delta,
            cost,
            window: has_window,
            token_delta,
            request_delta,
        });
    }
}

pub(super) fn flag(on: bool) -> &'static str {
    if on {
        "1"
    } else {
        "0"
    }
}

/// `name`, or `other` when `name` is empty (a script's unused key: one of the call's own, so
/// that both stay in one Redis Cluster slot).
pub(super) fn placeholder<'a>(name: &'a str, other: &'a str) -> &'a str {
    if name.is_empty() {
        other
    } else {
        name
    }
}
