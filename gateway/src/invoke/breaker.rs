//! The circuit breaker: one per API (docs/ARCHITECTURE.md, "The invoke tier"), with the
//! textbook states Closed / Open / HalfOpen.
//!
//! - **Closed**: calls go through. The breaker trips to Open on any of
//!   - `consecutive_failures` failures in a row (default [`DEFAULT_CONSECUTIVE_FAILURES`];
//!     0 turns this mode off);
//!   - `consecutive_slow_calls` successes in a row each slower than `slow_call_ms` (only when
//!     `slow_call_ms` is set; default count [`DEFAULT_CONSECUTIVE_SLOW_CALLS`]; 0 turns it off);
//!   - Sentinel's error ratio (only when `error_ratio` is set): over a rolling window of
//!     `window_ms` (default [`DEFAULT_WINDOW_MS`], [`WINDOW_BUCKETS`] buckets) holding at
//!     least `min_calls` calls (default [`DEFAULT_MIN_CALLS`]), failures / calls ≥ `error_ratio`.
//!
//!   Only a success that is not slow breaks the two streaks: a slow success neither extends
//!   nor breaks the failure streak, and a failure neither extends nor breaks the slow streak,
//!   so a backend alternating between timeouts and slow answers still trips.
//! - **Open**: every call is refused at once with 503 `CIRCUIT_OPEN` and `Retry-After` (the
//!   seconds left, at least 1); the backend is not touched. After `open_ms` (default
//!   [`DEFAULT_OPEN_MS`]) the breaker is HalfOpen.
//! - **HalfOpen**: `half_open_probes` calls (default [`DEFAULT_HALF_OPEN_PROBES`]) are let
//!   through, concurrently; any other call is refused with `CIRCUIT_OPEN`. When all of them
//!   succeed (none slow) the breaker is Closed again with fresh counters; the first probe that
//!   fails, is slow, is dropped unrecorded (a cancelled request) or passes its deadline (a stuck
//!   probe, counted as failing at its deadline) opens it again for a fresh `open_ms`.
//!
//! The Closed path takes no lock (one atomic load to admit, a few atomic operations to record);
//! the error-ratio window and the transitions use small mutexes. Time comes from a [`Clock`],
//! so the state machine can be tested with a [`ManualClock`].

use crate::error::{Code, GatewayError};
use portico_control::v1::{BreakerPolicy, DEFAULT_TIMEOUT_MS};
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Failures in a row that trip a breaker whose policy does not say.
pub const DEFAULT_CONSECUTIVE_FAILURES: u32 = 5;
/// Slow calls in a row that trip a breaker with `slow_call_ms` but no `consecutive_slow_calls`.
pub const DEFAULT_CONSECUTIVE_SLOW_CALLS: u32 = 5;
/// How long a breaker stays Open before it lets probes through.
pub const DEFAULT_OPEN_MS: u64 = 5000;
/// Probe calls let through in HalfOpen.
pub const DEFAULT_HALF_OPEN_PROBES: u32 = 1;
/// Calls the error-ratio window must hold before its ratio can trip the breaker.
pub const DEFAULT_MIN_CALLS: u32 = 20;
/// Length of the error-ratio window.
pub const DEFAULT_WINDOW_MS: u64 = 10_000;
/// Buckets of the error-ratio window: it slides by `window_ms / WINDOW_BUCKETS`.
pub const WINDOW_BUCKETS: usize = 10;

// ---------------------------------------------------------------------------------------------
// Clock

/// A source of monotonic milliseconds (from an arbitrary start).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the clock's start; never goes backwards.
    fn now_ms(&self) -> u64;
}

/// The real clock: milliseconds since it was made, from [`Instant`] (monotonic).
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    start: Instant,
}

impl SystemClock {
    /// A clock reading 0 now.
    pub fn new() -> Self {
        SystemClock {
            start: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told to: for tests of time-dependent state.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock {
            now: AtomicU64::new(start_ms),
        }
    }

    /// Moves the clock `ms` milliseconds forward.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms` (callers keep it monotonic).
    pub fn set(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration and state

/// A breaker's effective settings: a [`BreakerPolicy`] with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    /// Failures in a row that trip; 0: this mode is off.
    pub consecutive_failures: u32,
    /// A success slower than this (strictly) is a slow call; `None`: the slow-call mode is off.
    pub slow_call_ms: Option<u64>,
    /// Slow calls in a row that trip (when `slow_call_ms` is set); 0: this mode is off.
    pub consecutive_slow_calls: u32,
    /// How long the breaker stays Open.
    pub open_ms: u64,
    /// Probes let through in HalfOpen (at least 1).
    pub half_open_probes: u32,
    /// Failures / calls in the window that trip, in (0, 1]; `None`: the error-ratio mode is off.
    pub error_ratio: Option<f64>,
    /// Calls the window must hold before the ratio counts (at least 1).
    pub min_calls: u32,
    /// The window's length (at least [`WINDOW_BUCKETS`] ms).
    pub window_ms: u64,
}

impl BreakerConfig {
    /// Applies the defaults to `policy` (`None`: all defaults). Out-of-range values are made
    /// safe rather than refused (validation is the control plane's job): 0 probes → 1,
    /// 0 `min_calls` → 1, a `window_ms` below [`WINDOW_BUCKETS`] → [`WINDOW_BUCKETS`], an
    /// `error_ratio` that is not a number or ≤ 0 → mode off, above 1 → 1.
    pub fn from_policy(policy: Option<&BreakerPolicy>) -> Self {
        let default = BreakerPolicy::default();
        let p = policy.unwrap_or(&default);
        BreakerConfig {
            consecutive_failures: p
                .consecutive_failures
                .unwrap_or(DEFAULT_CONSECUTIVE_FAILURES),
            slow_call_ms: p.slow_call_ms,
            consecutive_slow_calls: p
                .consecutive_slow_calls
                .unwrap_or(DEFAULT_CONSECUTIVE_SLOW_CALLS),
            open_ms: p.open_ms.unwrap_or(DEFAULT_OPEN_MS),
            half_open_probes: p
                .half_open_probes
                .unwrap_or(DEFAULT_HALF_OPEN_PROBES)
                .max(1),
            error_ratio: p.error_ratio.filter(|r| *r > 0.0).map(|r| r.min(1.0)),
            min_calls: p.min_calls.unwrap_or(DEFAULT_MIN_CALLS).max(1),
            window_ms: p
                .window_ms
                .unwrap_or(DEFAULT_WINDOW_MS)
                .max(WINDOW_BUCKETS as u64),
        }
    }

    /// Whether a success that took `latency` is a slow call.
    fn is_slow(&self, latency: Duration) -> bool {
        match self.slow_call_ms {
            Some(limit) => latency > Duration::from_millis(limit),
            None => false,
        }
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig::from_policy(None)
    }
}

/// The textbook breaker states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls go through; failures are counted.
    Closed,
    /// Calls are refused with `CIRCUIT_OPEN` until `open_ms` has passed.
    Open,
    /// A few probe calls go through; their outcome closes or re-opens the breaker.
    HalfOpen,
}

impl BreakerState {
    /// The state's name in /status and metric labels: `closed`, `open`, `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// The state as a gauge value: 0 closed, 1 open, 2 half_open.
    pub fn gauge(self) -> i64 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
        }
    }

    fn from_bits(bits: u64) -> Self {
        match bits & STATE_MASK {
            0 => BreakerState::Closed,
            1 => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The phase word packs the state (low two bits) with an epoch that grows on every transition,
/// so a ticket can tell whether the period it was issued in is still the current one.
const STATE_MASK: u64 = 0b11;

fn phase_word(epoch: u64, state: BreakerState) -> u64 {
    (epoch << 2) | state.gauge() as u64
}

// ---------------------------------------------------------------------------------------------
// The rolling error-ratio window

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// `now_ms / bucket_ms` of the calls counted here; `u64::MAX`: empty.
    index: u64,
    calls: u64,
    failures: u64,
}

const EMPTY_BUCKET: Bucket = Bucket {
    index: u64::MAX,
    calls: 0,
    failures: 0,
};

#[derive(Debug)]
struct Window {
    bucket_ms: u64,
    buckets: [Bucket; WINDOW_BUCKETS],
}

impl Window {
    fn new(window_ms: u64) -> Self {
        Window {
            bucket_ms: window_ms.div_ceil(WINDOW_BUCKETS as u64).max(1),
            buckets: [EMPTY_BUCKET; WINDOW_BUCKETS],
        }
    }

    fn reset(&mut self) {
        self.buckets = [EMPTY_BUCKET; WINDOW_BUCKETS];
    }

    /// Counts one call at `now_ms`; returns (calls, failures) over the window ending now.
    fn record(&mut self, now_ms: u64, failed: bool) -> (u64, u64) {
        let current = now_ms / self.bucket_ms;
        let slot = (current % WINDOW_BUCKETS as u64) as usize;
        let bucket = &mut self.buckets[slot];
        if bucket.index != current {
            *bucket = Bucket {
                index: current,
                calls: 0,
                failures: 0,
            };
        }
        bucket.calls += 1;
        if failed {
            bucket.failures += 1;
        }
        self.buckets
            .iter()
            .filter(|b| b.index <= current && current - b.index < WINDOW_BUCKETS as u64)
            .fold((0, 0), |(c, f), b| (c + b.calls, f + b.failures))
    }
}

// ---------------------------------------------------------------------------------------------
// The breaker

/// Probe bookkeeping of the current HalfOpen period; its mutex is also the transition lock.
#[derive(Debug, Default)]
struct Transitions {
    /// Probes let through in this HalfOpen period (their ids are 0..admitted).
    admitted: u32,
    /// Probes that succeeded (not slow) in this HalfOpen period.
    succeeded: u32,
    /// Probes not yet recorded: (id, deadline in clock ms).
    in_flight: Vec<(u32, u64)>,
}

#[derive(Debug)]
struct Core {
    config: BreakerConfig,
    clock: Arc<dyn Clock>,
    /// `epoch << 2 | state` (see [`phase_word`]); written only under `transitions`.
    phase: AtomicU64,
    /// When Open ends (clock ms); meaningful while the state is Open.
    open_until: AtomicU64,
    failure_streak: AtomicU32,
    slow_streak: AtomicU32,
    window: Option<Mutex<Window>>,
    transitions: Mutex<Transitions>,
    opened_total: AtomicU64,
    rejected_total: AtomicU64,
}

/// One API's circuit breaker. Cloning shares the breaker (clones are the same breaker).
#[derive(Debug, Clone)]
pub struct Breaker {
    core: Arc<Core>,
}

/// The outcome of one call, as the breaker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Success {
        slow: bool,
    },
    Failure,
    /// Dropped without being recorded (a cancelled request).
    Abandoned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TicketKind {
    /// Issued while Closed, in the period `phase`.
    Closed { phase: u64 },
    /// Probe `id` of the HalfOpen period `phase`.
    Probe {
        phase: u64,
        id: u32,
        deadline_ms: u64,
    },
}

/// Leave to make one call through a breaker. Record its outcome with [`CallTicket::success`]
/// or [`CallTicket::failure`]; a ticket dropped without either (a cancelled request) counts
/// as a failure if it was a HalfOpen probe and is ignored otherwise.
#[derive(Debug)]
#[must_use = "record the call's outcome with success() or failure()"]
pub struct CallTicket {
    core: Arc<Core>,
    kind: TicketKind,
    recorded: bool,
}

impl CallTicket {
    /// Records that the call succeeded after `latency` (a success slower than `slow_call_ms`
    /// counts as a slow call, not as a failure; a slow probe re-opens the breaker).
    pub fn success(mut self, latency: Duration) {
        self.recorded = true;
        let slow = self.core.config.is_slow(latency);
        self.core.record(self.kind, Outcome::Success { slow });
    }

    /// Records that the call failed (timeout, connect error, 5xx, gRPC UNAVAILABLE/INTERNAL/
    /// UNKNOWN/DEADLINE_EXCEEDED: the invoke tier decides what is a backend failure, from the
    /// error's `Code::side`).
    pub fn failure(mut self) {
        self.recorded = true;
        self.core.record(self.kind, Outcome::Failure);
    }

    /// Records that the call never reached the backend and failing it cost no time (the
    /// backend's host refused the connection: nothing listens there, e.g. while it
    /// restarts). While Closed this counts neither for nor against the backend: failing
    /// such calls is already immediate and loads nothing, and counting them kept the
    /// breaker open for `open_ms` after a restarted backend was answering again
    /// (docs/operations/clusters.md, "gRPC client settings": the breaker after a restart).
    /// A probe refused so re-opens the breaker, as any probe that did not succeed.
    pub fn not_reached(mut self) {
        self.recorded = true;
        self.core.record(self.kind, Outcome::Abandoned);
    }

    /// Whether this call is a HalfOpen probe (its outcome decides the breaker's next state).
    pub fn is_probe(&self) -> bool {
        matches!(self.kind, TicketKind::Probe { .. })
    }
}

impl Drop for CallTicket {
    fn drop(&mut self) {
        if !self.recorded && self.is_probe() {
            self.core.record(self.kind, Outcome::Abandoned);
        }
    }
}

impl Breaker {
    /// A Closed breaker for `policy` (`None`: all defaults), reading time from `clock`.
    pub fn new(policy: Option<&BreakerPolicy>, clock: Arc<dyn Clock>) -> Self {
        let config = BreakerConfig::from_policy(policy);
        let window = config
            .error_ratio
            .map(|_| Mutex::new(Window::new(config.window_ms)));
        Breaker {
            core: Arc::new(Core {
                config,
                clock,
                phase: AtomicU64::new(phase_word(0, BreakerState::Closed)),
                open_until: AtomicU64::new(0),
                failure_streak: AtomicU32::new(0),
                slow_streak: AtomicU32::new(0),
                window,
                transitions: Mutex::new(Transitions::default()),
                opened_total: AtomicU64::new(0),
                rejected_total: AtomicU64::new(0),
            }),
        }
    }

    /// Asks leave for one call whose deadline is the default backend timeout
    /// ([`DEFAULT_TIMEOUT_MS`]); see [`Breaker::try_acquire_with_timeout`].
    pub fn try_acquire(&self) -> Result<CallTicket, GatewayError> {
        self.try_acquire_with_timeout(Duration::from_millis(DEFAULT_TIMEOUT_MS))
    }

    /// Asks leave for one call that will give up after `timeout` (the API's `timeout_ms`).
    /// `Ok(ticket)`: make the call and record its outcome on the ticket; if the ticket is a
    /// HalfOpen probe and is still unrecorded at its deadline, it counts as failed then.
    /// `Err`: 503 `CIRCUIT_OPEN` — do not touch the backend; `retry_after` holds the seconds
    /// until the breaker lets probes through (at least 1).
    pub fn try_acquire_with_timeout(&self, timeout: Duration) -> Result<CallTicket, GatewayError> {
        let core = &self.core;
        let phase = core.phase.load(Ordering::Acquire);
        match BreakerState::from_bits(phase) {
            BreakerState::Closed => Ok(self.ticket(TicketKind::Closed { phase })),
            BreakerState::Open => {
                let now = core.clock.now_ms();
                let until = core.open_until.load(Ordering::Acquire);
                if now < until {
                    Err(core.reject_open(now, until))
                } else {
                    self.acquire_slow(timeout)
                }
            }
            BreakerState::HalfOpen => self.acquire_slow(timeout),
        }
    }

    /// The admission path that may change state (Open → HalfOpen) or take a probe slot.
    fn acquire_slow(&self, timeout: Duration) -> Result<CallTicket, GatewayError> {
        let core = &self.core;
        let mut t = core.lock_transitions();
        let now = core.clock.now_ms();
        let phase = core.settle(&mut t, now);
        match BreakerState::from_bits(phase) {
            BreakerState::Closed => Ok(self.ticket(TicketKind::Closed { phase })),
            BreakerState::Open => {
                Err(core.reject_open(now, core.open_until.load(Ordering::Acquire)))
            }
            BreakerState::HalfOpen => {
                if t.admitted >= core.config.half_open_probes {
                    core.rejected_total.fetch_add(1, Ordering::Relaxed);
                    return Err(GatewayError::new(
                        Code::CircuitOpen,
                        "the API's circuit breaker is half-open and its probe calls are in flight",
                    )
                    .with_retry_after(1));
                }
                let id = t.admitted;
                t.admitted += 1;
                let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
                let deadline_ms = now.saturating_add(timeout_ms);
                t.in_flight.push((id, deadline_ms));
                Ok(self.ticket(TicketKind::Probe {
                    phase,
                    id,
                    deadline_ms,
                }))
            }
        }
    }

    fn ticket(&self, kind: TicketKind) -> CallTicket {
        CallTicket {
            core: Arc::clone(&self.core),
            kind,
            recorded: false,
        }
    }

    /// The current state. Reading it also makes the transitions that time alone causes: Open
    /// becomes HalfOpen once `open_ms` has passed, and a HalfOpen probe past its deadline
    /// re-opens the breaker.
    pub fn state(&self) -> BreakerState {
        let core = &self.core;
        let phase = core.phase.load(Ordering::Acquire);
        match BreakerState::from_bits(phase) {
            BreakerState::Closed => BreakerState::Closed,
            BreakerState::Open if core.clock.now_ms() < core.open_until.load(Ordering::Acquire) => {
                BreakerState::Open
            }
            BreakerState::Open | BreakerState::HalfOpen => {
                let mut t = core.lock_transitions();
                let now = core.clock.now_ms();
                BreakerState::from_bits(core.settle(&mut t, now))
            }
        }
    }

    /// The effective settings (policy with defaults applied), e.g. for /status.
    pub fn config(&self) -> &BreakerConfig {
        &self.core.config
    }

    /// Whether `policy` gives this same breaker (defaults applied on both sides): `true` means
    /// the gateway should keep this breaker, with its state, across a snapshot reload.
    pub fn same_policy(&self, policy: Option<&BreakerPolicy>) -> bool {
        BreakerConfig::from_policy(policy) == self.core.config
    }

    /// Times the breaker went to Open (from Closed or HalfOpen): a counter for /metrics.
    pub fn opened_total(&self) -> u64 {
        self.core.opened_total.load(Ordering::Relaxed)
    }

    /// Calls refused with `CIRCUIT_OPEN` (in Open or HalfOpen): a counter for /metrics.
    pub fn rejected_total(&self) -> u64 {
        self.core.rejected_total.load(Ordering::Relaxed)
    }
}

impl Core {
    fn lock_transitions(&self) -> MutexGuard<'_, Transitions> {
        self.transitions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn reject_open(&self, now: u64, until: u64) -> GatewayError {
        self.rejected_total.fetch_add(1, Ordering::Relaxed);
        let secs = until.saturating_sub(now).div_ceil(1000).max(1);
        GatewayError::new(
            Code::CircuitOpen,
            format!("the API's circuit breaker is open; retry in {secs} s"),
        )
        .with_retry_after(secs)
    }

    /// Makes the transitions due by `now` (Open → HalfOpen after `open_ms`; a HalfOpen probe
    /// past its deadline → Open, as of that deadline) and returns the resulting phase word.
    fn settle(&self, t: &mut Transitions, now: u64) -> u64 {
        loop {
            let phase = self.phase.load(Ordering::Acquire);
            match BreakerState::from_bits(phase) {
                BreakerState::Closed => return phase,
                BreakerState::Open => {
                    if now < self.open_until.load(Ordering::Acquire) {
                        return phase;
                    }
                    self.to_half_open(t, phase);
                }
                BreakerState::HalfOpen => {
                    let stuck = t
                        .in_flight
                        .iter()
                        .map(|&(_, deadline)| deadline)
                        .filter(|&deadline| deadline <= now)
                        .min();
                    match stuck {
                        // Each round moves to a later open_until or ends, so this terminates.
                        Some(deadline) => self.to_open(t, phase, deadline),
                        None => return phase,
                    }
                }
            }
        }
    }

    fn next_phase(phase: u64, state: BreakerState) -> u64 {
        phase_word((phase >> 2).wrapping_add(1), state)
    }

    fn to_open(&self, t: &mut Transitions, phase: u64, at_ms: u64) {
        *t = Transitions::default();
        self.open_until
            .store(at_ms.saturating_add(self.config.open_ms), Ordering::Release);
        self.opened_total.fetch_add(1, Ordering::Relaxed);
        self.phase.store(
            Self::next_phase(phase, BreakerState::Open),
            Ordering::Release,
        );
    }

    fn to_half_open(&self, t: &mut Transitions, phase: u64) {
        *t = Transitions::default();
        self.phase.store(
            Self::next_phase(phase, BreakerState::HalfOpen),
            Ordering::Release,
        );
    }

    fn to_closed(&self, t: &mut Transitions, phase: u64) {
        *t = Transitions::default();
        self.failure_streak.store(0, Ordering::Relaxed);
        self.slow_streak.store(0, Ordering::Relaxed);
        if let Some(window) = &self.window {
            window
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .reset();
        }
        self.phase.store(
            Self::next_phase(phase, BreakerState::Closed),
            Ordering::Release,
        );
    }

    fn record(&self, kind: TicketKind, outcome: Outcome) {
        match kind {
            TicketKind::Closed { phase } => self.record_closed(phase, outcome),
            TicketKind::Probe {
                phase,
                id,
                deadline_ms,
            } => self.record_probe(phase, id, deadline_ms, outcome),
        }
    }

    /// Counts a call issued while Closed; ignored if the breaker has left that Closed period.
    fn record_closed(&self, phase: u64, outcome: Outcome) {
        if outcome == Outcome::Abandoned || self.phase.load(Ordering::Acquire) != phase {
            return;
        }
        let config = &self.config;
        let mut trip = false;
        match outcome {
            Outcome::Success { slow: false } => {
                if self.failure_streak.load(Ordering::Relaxed) != 0 {
                    self.failure_streak.store(0, Ordering::Relaxed);
                }
                if self.slow_streak.load(Ordering::Relaxed) != 0 {
                    self.slow_streak.store(0, Ordering::Relaxed);
                }
            }
            Outcome::Success { slow: true } => {
                if config.consecutive_slow_calls > 0 {
                    let n = self
                        .slow_streak
                        .fetch_add(1, Ordering::Relaxed)
                        .saturating_add(1);
                    trip |= n >= config.consecutive_slow_calls;
                }
            }
            Outcome::Failure => {
                if config.consecutive_failures > 0 {
                    let n = self
                        .failure_streak
                        .fetch_add(1, Ordering::Relaxed)
                        .saturating_add(1);
                    trip |= n >= config.consecutive_failures;
                }
            }
            Outcome::Abandoned => {}
        }
        if let (Some(window), Some(ratio)) = (&self.window, config.error_ratio) {
            let mut w = window
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let (calls, failures) = w.record(self.clock.now_ms(), outcome == Outcome::Failure);
            drop(w);
            trip |= calls >= u64::from(config.min_calls) && failures as f64 / calls as f64 >= ratio;
        }
        if trip {
            let mut t = self.lock_transitions();
            if self.phase.load(Ordering::Acquire) == phase {
                self.to_open(&mut t, phase, self.clock.now_ms());
            }
        }
    }

    /// Counts a HalfOpen probe: all probes succeeding closes, any other outcome re-opens.
    fn record_probe(&self, phase: u64, id: u32, deadline_ms: u64, outcome: Outcome) {
        let mut t = self.lock_transitions();
        if self.phase.load(Ordering::Acquire) != phase {
            return; // that HalfOpen period is over (another probe decided it)
        }
        let now = self.clock.now_ms();
        t.in_flight.retain(|&(probe, _)| probe != id);
        match outcome {
            Outcome::Success { slow: false } if now <= deadline_ms => {
                t.succeeded += 1;
                if t.succeeded >= self.config.half_open_probes {
                    self.to_closed(&mut t, phase);
                }
            }
            Outcome::Success { .. } | Outcome::Failure | Outcome::Abandoned => {
                self.to_open(&mut t, phase, now.min(deadline_ms));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(policy: Option<BreakerPolicy>) -> (Breaker, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let b = Breaker::new(policy.as_ref(), clock.clone());
        (b, clock)
    }

    fn failures(n: u32, open_ms: u64) -> BreakerPolicy {
        BreakerPolicy {
            consecutive_failures: Some(n),
            open_ms: Some(open_ms),
            ..BreakerPolicy::default()
        }
    }

    const FAST: Duration = Duration::from_millis(1);

    fn fail(b: &Breaker, n: u32) {
        for _ in 0..n {
            b.try_acquire().unwrap().failure();
        }
    }

    fn trip(b: &Breaker, n: u32) {
        fail(b, n);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn defaults() {
        let c = BreakerConfig::from_policy(None);
        assert_eq!(c.consecutive_failures, 5);
        assert_eq!(c.open_ms, 5000);
        assert_eq!(c.half_open_probes, 1);
        assert_eq!(c.slow_call_ms, None);
        assert_eq!(c.consecutive_slow_calls, 5);
        assert_eq!(c.error_ratio, None);
        assert_eq!(c.min_calls, 20);
        assert_eq!(c.window_ms, 10_000);
        assert_eq!(
            c,
            BreakerConfig::from_policy(Some(&BreakerPolicy::default()))
        );

        let odd = BreakerConfig::from_policy(Some(&BreakerPolicy {
            half_open_probes: Some(0),
            min_calls: Some(0),
            window_ms: Some(1),
            error_ratio: Some(0.0),
            ..BreakerPolicy::default()
        }));
        assert_eq!(odd.half_open_probes, 1);
        assert_eq!(odd.min_calls, 1);
        assert_eq!(odd.window_ms, WINDOW_BUCKETS as u64);
        assert_eq!(odd.error_ratio, None);
        let high = BreakerConfig::from_policy(Some(&BreakerPolicy {
            error_ratio: Some(7.0),
            ..BreakerPolicy::default()
        }));
        assert_eq!(high.error_ratio, Some(1.0));
    }

    #[test]
    fn state_names_and_gauges() {
        assert_eq!(BreakerState::Closed.as_str(), "closed");
        assert_eq!(BreakerState::Open.as_str(), "open");
        assert_eq!(BreakerState::HalfOpen.as_str(), "half_open");
        assert_eq!(BreakerState::Closed.gauge(), 0);
        assert_eq!(BreakerState::Open.gauge(), 1);
        assert_eq!(BreakerState::HalfOpen.gauge(), 2);
        assert_eq!(BreakerState::HalfOpen.to_string(), "half_open");
    }

    #[test]
    fn refused_connections_count_neither_way_but_fail_a_probe() {
        let (b, clock) = breaker(Some(failures(3, 5000)));
        fail(&b, 2);
        for _ in 0..10 {
            b.try_acquire().unwrap().not_reached();
        }
        assert_eq!(b.state(), BreakerState::Closed);
        // The streak was not broken either: one more failure is the third in a row.
        trip(&b, 1);
        clock.advance(5000);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let probe = b.try_acquire().unwrap();
        assert!(probe.is_probe());
        probe.not_reached();
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn no_trip_below_threshold() {
        let (b, _clock) = breaker(Some(failures(3, 5000)));
        fail(&b, 2);
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.try_acquire().is_ok());
        assert_eq!(b.opened_total(), 0);

        let (d, _clock) = breaker(None);
        fail(&d, DEFAULT_CONSECUTIVE_FAILURES - 1);
        assert_eq!(d.state(), BreakerState::Closed);
        fail(&d, 1);
        assert_eq!(d.state(), BreakerState::Open);
    }

    #[test]
    fn trips_at_threshold() {
        let (b, _clock) = breaker(Some(failures(3, 5000)));
        fail(&b, 3);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opened_total(), 1);
    }

    #[test]
    fn a_success_in_between_resets_the_count() {
        let (b, _clock) = breaker(Some(failures(3, 5000)));
        fail(&b, 2);
        b.try_acquire().unwrap().success(FAST);
        fail(&b, 2);
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn zero_disables_consecutive_failures() {
        let (b, _clock) = breaker(Some(failures(0, 5000)));
        fail(&b, 100);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn open_rejects_with_retry_after() {
        let (b, clock) = breaker(Some(failures(3, 5000)));
        trip(&b, 3);
        let err = b.try_acquire().unwrap_err();
        assert_eq!(err.code, Code::CircuitOpen);
        assert_eq!(err.status(), 503);
        assert_eq!(err.retry_after, Some(5));

        clock.advance(1200);
        assert_eq!(b.try_acquire().unwrap_err().retry_after, Some(4));
        clock.advance(3799); // 1 ms left
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.try_acquire().unwrap_err().retry_after, Some(1));
        assert_eq!(b.rejected_total(), 3);
    }

    #[test]
    fn half_open_after_open_ms_lets_exactly_one_probe_through() {
        let (b, clock) = breaker(Some(failures(3, 5000)));
        trip(&b, 3);
        clock.advance(4999);
        assert!(b.try_acquire().is_err());
        clock.advance(1);
        assert_eq!(b.state(), BreakerState::HalfOpen);

        let probe = b.try_acquire().unwrap();
        assert!(probe.is_probe());
        let second = b.try_acquire().unwrap_err();
        assert_eq!(second.code, Code::CircuitOpen);
        assert_eq!(second.retry_after, Some(1));
        assert_eq!(b.state(), BreakerState::HalfOpen);
        probe.success(FAST);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn lazily_half_open_on_acquire() {
        let (b, clock) = breaker(Some(failures(1, 100)));
        trip(&b, 1);
        clock.advance(100);
        // No state() call in between: the acquire itself moves Open → HalfOpen.
        let probe = b.try_acquire().unwrap();
        assert!(probe.is_probe());
        probe.failure();
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn probe_success_closes_with_fresh_counters() {
        let (b, clock) = breaker(Some(failures(3, 5000)));
        fail(&b, 2);
        b.try_acquire().unwrap().success(FAST);
        trip(&b, 3);
        clock.advance(5000);
        b.try_acquire().unwrap().success(FAST);
        assert_eq!(b.state(), BreakerState::Closed);
        let ticket = b.try_acquire().unwrap();
        assert!(!ticket.is_probe());
        ticket.success(FAST);
        fail(&b, 2);
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opened_total(), 2);
    }

    #[test]
    fn probe_failure_reopens_for_a_fresh_open_ms() {
        let (b, clock) = breaker(Some(failures(3, 5000)));
        trip(&b, 3);
        clock.advance(6000);
        let probe = b.try_acquire().unwrap();
        clock.advance(300);
        probe.failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opened_total(), 2);
        assert_eq!(b.try_acquire().unwrap_err().retry_after, Some(5));
        clock.advance(4999);
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(1);
        assert_eq!(b.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn slow_probe_reopens() {
        let (b, clock) = breaker(Some(BreakerPolicy {
            consecutive_failures: Some(1),
            slow_call_ms: Some(50),
            open_ms: Some(1000),
            ..BreakerPolicy::default()
        }));
        trip(&b, 1);
        clock.advance(1000);
        b.try_acquire().unwrap().success(Duration::from_millis(51));
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(1000);
        b.try_acquire().unwrap().success(Duration::from_millis(50));
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn stuck_probe_counts_as_failure_at_its_deadline() {
        let (b, clock) = breaker(Some(failures(1, 5000)));
        trip(&b, 1);
        clock.advance(5000);
        let stuck = b
            .try_acquire_with_timeout(Duration::from_millis(800))
            .unwrap();
        clock.advance(799);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.try_acquire().is_err());
        clock.advance(1);
        // At its deadline the probe is a failure: Open again, for open_ms from the deadline.
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opened_total(), 2);
        assert_eq!(b.try_acquire().unwrap_err().retry_after, Some(5));
        clock.advance(5000);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // The stuck call finally answering belongs to an old period: ignored.
        stuck.success(FAST);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        b.try_acquire().unwrap().success(FAST);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn stuck_probe_noticed_late_does_not_block_forever() {
        let (b, clock) = breaker(Some(failures(1, 1000)));
        trip(&b, 1);
        clock.advance(1000);
        let _stuck = b
            .try_acquire_with_timeout(Duration::from_millis(100))
            .unwrap();
        clock.advance(10_000); // nobody looked: deadline + open_ms is long past
        let probe = b.try_acquire().unwrap();
        assert!(probe.is_probe());
        probe.success(FAST);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn late_probe_success_counts_as_failure() {
        let (b, clock) = breaker(Some(failures(1, 1000)));
        trip(&b, 1);
        clock.advance(1000);
        let probe = b
            .try_acquire_with_timeout(Duration::from_millis(100))
            .unwrap();
        clock.advance(150);
        probe.success(FAST);
        assert_eq!(b.state(), BreakerState::Open);
        // Re-opened as of the deadline: 1000 - 50 ms left.
        clock.advance(949);
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(1);
        assert_eq!(b.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn dropped_probe_reopens() {
        let (b, clock) = breaker(Some(failures(2, 1000)));
        trip(&b, 2);
        clock.advance(1000);
        let probe = b.try_acquire().unwrap();
        drop(probe);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opened_total(), 2);
    }

    #[test]
    fn dropped_ticket_in_closed_is_ignored() {
        let (b, _clock) = breaker(Some(failures(3, 1000)));
        fail(&b, 2);
        for _ in 0..10 {
            drop(b.try_acquire().unwrap());
        }
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b, 1); // the drops neither counted nor reset the streak
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn several_probes_all_must_succeed() {
        let (b, clock) = breaker(Some(BreakerPolicy {
            consecutive_failures: Some(1),
            half_open_probes: Some(3),
            open_ms: Some(1000),
            ..BreakerPolicy::default()
        }));
        trip(&b, 1);
        clock.advance(1000);
        let p1 = b.try_acquire().unwrap();
        let p2 = b.try_acquire().unwrap();
        let p3 = b.try_acquire().unwrap();
        assert!(b.try_acquire().is_err());
        p1.success(FAST);
        p2.success(FAST);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        p3.success(FAST);
        assert_eq!(b.state(), BreakerState::Closed);

        trip(&b, 1);
        clock.advance(1000);
        let p1 = b.try_acquire().unwrap();
        let p2 = b.try_acquire().unwrap();
        p1.success(FAST);
        p2.failure();
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn closed_era_tickets_finishing_late_are_ignored() {
        let (b, clock) = breaker(Some(failures(2, 1000)));
        let late = b.try_acquire().unwrap();
        trip(&b, 2);
        clock.advance(1000);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        late.success(FAST); // must not close the breaker: only probes decide HalfOpen
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let probe = b.try_acquire().unwrap();
        assert!(probe.is_probe());
        probe.success(FAST);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn slow_calls_trip() {
        let (b, _clock) = breaker(Some(BreakerPolicy {
            consecutive_failures: Some(3),
            slow_call_ms: Some(50),
            consecutive_slow_calls: Some(3),
            ..BreakerPolicy::default()
        }));
        let slow = Duration::from_millis(80);
        b.try_acquire().unwrap().success(slow);
        b.try_acquire().unwrap().success(slow);
        b.try_acquire().unwrap().success(FAST); // a fast success breaks the slow streak
        b.try_acquire().unwrap().success(slow);
        b.try_acquire().unwrap().success(slow);
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b, 2); // failures are not slow calls, and do not break the slow streak
        assert_eq!(b.state(), BreakerState::Closed);
        b.try_acquire().unwrap().success(slow);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn a_slow_success_is_not_a_failure() {
        let (b, _clock) = breaker(Some(BreakerPolicy {
            consecutive_failures: Some(2),
            slow_call_ms: Some(50),
            consecutive_slow_calls: Some(10),
            ..BreakerPolicy::default()
        }));
        fail(&b, 1);
        b.try_acquire().unwrap().success(Duration::from_millis(500));
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn no_slow_mode_without_slow_call_ms() {
        let (b, _clock) = breaker(None);
        for _ in 0..100 {
            b.try_acquire().unwrap().success(Duration::from_secs(60));
        }
        assert_eq!(b.state(), BreakerState::Closed);
    }

    fn ratio_policy() -> BreakerPolicy {
        BreakerPolicy {
            consecutive_failures: Some(1000), // out of the way: only the ratio trips
            error_ratio: Some(0.5),
            min_calls: Some(10),
            window_ms: Some(10_000),
            open_ms: Some(1000),
            ..BreakerPolicy::default()
        }
    }

    #[test]
    fn error_ratio_trips_only_after_min_calls() {
        let (b, _clock) = breaker(Some(ratio_policy()));
        fail(&b, 9);
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opened_total(), 1);
    }

    #[test]
    fn error_ratio_below_threshold_does_not_trip() {
        let (b, _clock) = breaker(Some(ratio_policy()));
        for _ in 0..50 {
            b.try_acquire().unwrap().success(FAST);
            b.try_acquire().unwrap().success(FAST);
            b.try_acquire().unwrap().failure();
        }
        assert_eq!(b.state(), BreakerState::Closed);
        // Reaching the ratio exactly trips: 50 failures + 50 more = 100 / 200.
        fail(&b, 49);
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn error_ratio_is_checked_on_successes_too() {
        let (b, _clock) = breaker(Some(ratio_policy()));
        fail(&b, 8);
        b.try_acquire().unwrap().success(FAST);
        assert_eq!(b.state(), BreakerState::Closed);
        b.try_acquire().unwrap().success(FAST); // 10 calls, 8 failures
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn error_ratio_window_keeps_recent_calls() {
        let (b, clock) = breaker(Some(ratio_policy()));
        fail(&b, 9); // t0
        clock.advance(5000);
        b.try_acquire().unwrap().success(FAST); // t0 + 5 s: 10 calls, 9 failures in the window
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opened_total(), 1);
    }

    #[test]
    fn error_ratio_window_expires_old_calls() {
        let (b, clock) = breaker(Some(ratio_policy()));
        fail(&b, 9);
        clock.advance(10_000); // the whole window has slid past the failures
        for _ in 0..9 {
            b.try_acquire().unwrap().success(FAST);
        }
        b.try_acquire().unwrap().failure();
        assert_eq!(b.state(), BreakerState::Closed); // 1 / 10 in the window
        assert_eq!(b.opened_total(), 0);

        // Partly slid: failures 9 s old still count, 10 s old do not.
        let (c, clock) = breaker(Some(ratio_policy()));
        fail(&c, 5); // t0
        clock.advance(9000);
        fail(&c, 4); // t0 + 9 s
        assert_eq!(c.state(), BreakerState::Closed); // 9 calls < min_calls
        clock.advance(1000); // t0 + 10 s: the first 5 leave the window
        for _ in 0..5 {
            c.try_acquire().unwrap().success(FAST);
        }
        assert_eq!(c.state(), BreakerState::Closed); // 4 / 9 in the window, below min_calls
        c.try_acquire().unwrap().success(FAST);
        assert_eq!(c.state(), BreakerState::Closed); // 4 / 10 < 0.5
        c.try_acquire().unwrap().failure();
        assert_eq!(c.state(), BreakerState::Closed); // 5 / 11 < 0.5
        c.try_acquire().unwrap().failure();
        assert_eq!(c.state(), BreakerState::Open); // 6 / 12 ≥ 0.5
    }

    #[test]
    fn error_ratio_window_is_fresh_after_closing() {
        let (b, clock) = breaker(Some(ratio_policy()));
        fail(&b, 10);
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(1000);
        b.try_acquire().unwrap().success(FAST);
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b, 9); // 9 calls since closing: below min_calls, old failures forgotten
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn same_policy_compares_effective_settings() {
        let (b, _clock) = breaker(None);
        assert!(b.same_policy(None));
        assert!(b.same_policy(Some(&BreakerPolicy::default())));
        assert!(b.same_policy(Some(&failures(5, 5000))));
        assert!(!b.same_policy(Some(&failures(3, 5000))));
        let (r, _clock) = breaker(Some(ratio_policy()));
        assert!(r.same_policy(Some(&ratio_policy())));
        assert!(!r.same_policy(None));
    }

    #[test]
    fn clones_share_state() {
        let (b, _clock) = breaker(Some(failures(1, 1000)));
        let c = b.clone();
        fail(&b, 1);
        assert_eq!(c.state(), BreakerState::Open);
    }

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let a = clock.now_ms();
        std::thread::sleep(Duration::from_millis(5));
        let b = clock.now_ms();
        assert!(b >= a + 4, "{a} -> {b}");
    }

    #[test]
    fn concurrent_failures_trip_once() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let b = Breaker::new(Some(&failures(50, 60_000)), clock);
        std::thread::scope(|s| {
            for _ in 0..4 {
                let b = b.clone();
                s.spawn(move || {
                    for _ in 0..100 {
                        if let Ok(t) = b.try_acquire() {
                            t.failure();
                        }
                    }
                });
            }
        });
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opened_total(), 1);
    }
}
