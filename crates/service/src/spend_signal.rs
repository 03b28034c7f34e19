//! Spend signals: which budgets a usage flush or a refusal touched, from the usage recorder and
//! spend governance to whoever listens (the budget alerts). Shared ground: it imports no
//! capability. Sending never blocks and never fails the caller: with nobody listening it does
//! nothing, and a full queue drops the signal (the next flush of the same budget signals again).

use aigw_domain::{ApiKeyId, LimitScope, TeamId, UserId};
use std::sync::{Arc, OnceLock};
use tokio::sync::mpsc;

/// Signals a listener may hold unread before more are dropped.
const QUEUE: usize = 1024;

/// One key whose budgets spent money (a usage flush wrote its calls) or refused a call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpendSignal {
    /// The key.
    pub key_id: ApiKeyId,
    /// Its owner (for a team key: who created it).
    pub user_id: UserId,
    /// The team it is scoped to.
    pub team_id: Option<TeamId>,
    /// Whether it is a member's key scoped to the team (its calls count against the member's
    /// budget in the team); `false` for a team key or a personal key.
    pub member: bool,
    /// The budget that refused a call (`None`: spend was written).
    pub refused: Option<Refusal>,
}

/// A call a budget refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Refusal {
    /// The level whose budget refused it.
    pub scope: LimitScope,
    /// What the budget's counter held then: spent and reserved by running calls, micro-USD.
    pub committed_micros: i64,
}

impl SpendSignal {
    /// Whether the key is a team key (scoped to a team, with no member charged).
    pub fn team_key(&self) -> bool {
        self.team_id.is_some() && !self.member
    }
}

/// Where spend signals go. Cheap to clone; every clone feeds the same listener.
#[derive(Debug, Clone, Default)]
pub struct SpendSignals {
    sender: Arc<OnceLock<mpsc::Sender<Vec<SpendSignal>>>>,
}

impl SpendSignals {
    /// The one listener's end (`None` when a listener was made already).
    pub fn listen(&self) -> Option<mpsc::Receiver<Vec<SpendSignal>>> {
        let (sender, receiver) = mpsc::channel(QUEUE);
        self.sender.set(sender).ok().map(|()| receiver)
    }

    /// Whether anyone listens (callers skip building signals otherwise).
    pub fn listened(&self) -> bool {
        self.sender.get().is_some()
    }

    /// Sends `signals` to the listener, if any and if it has room.
    pub fn send(&self, signals: Vec<SpendSignal>) {
        if signals.is_empty() {
            return;
        }
        if let Some(sender) = self.sender.get() {
            if sender.try_send(signals).is_err() {
                tracing::debug!("spend signal dropped: the listener is behind");
            }
        }
    }
}
