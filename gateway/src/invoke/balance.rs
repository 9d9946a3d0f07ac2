//! Load balancing over a cluster's endpoints: smooth weighted round-robin, nginx's algorithm
//! (`ngx_http_upstream_get_peer`): on each pick every endpoint's current weight grows by its
//! weight, the largest current weight wins and loses the total. Weights 5:1:1 give
//! `a a b a c a a`, spreading the light endpoints instead of bunching them.
//!
//! The sequence repeats after `sum(weights / gcd)` picks, so for ordinary clusters (one period
//! of at most [`MAX_PRECOMPUTED`] picks) it is computed once and a pick is one atomic
//! increment. Larger weight sums run the algorithm live under a tiny mutex.
//!
//! An endpoint of weight 0 is never picked (drained).

use portico_control::v1::Endpoint;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The longest period precomputed for lock-free picks.
pub const MAX_PRECOMPUTED: u64 = 4096;

#[derive(Debug)]
enum Mode {
    /// No endpoint with a weight above 0.
    Empty,
    /// One period of the sequence (indexes into `peers`), walked by a shared counter.
    Cycle {
        order: Box<[u32]>,
        next: AtomicUsize,
    },
    /// The current weights of the live algorithm, one per peer.
    Live(Mutex<Vec<i64>>),
}

/// A weighted round-robin balancer over one cluster's endpoints. Shared by all worker threads.
#[derive(Debug)]
pub struct Balancer {
    /// The endpoints as configured (for [`Balancer::same_endpoints`]).
    configured: Vec<Endpoint>,
    /// The pickable endpoints (weight > 0): address and weight.
    peers: Vec<(String, i64)>,
    /// For each peer, its index in `configured`.
    index: Vec<usize>,
    mode: Mode,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// One step of smooth weighted round-robin over the peers that `eligible` admits; returns the
/// winner's index, or `None` if no peer is eligible.
fn smooth_step(
    peers: &[(String, i64)],
    current: &mut [i64],
    eligible: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut total = 0i64;
    let mut best: Option<usize> = None;
    for (i, (_, weight)) in peers.iter().enumerate() {
        if !eligible(i) {
            continue;
        }
        current[i] += weight;
        total += weight;
        if best.is_none_or(|b| current[i] > current[b]) {
            best = Some(i);
        }
    }
    if let Some(b) = best {
        current[b] -= total;
    }
    best
}

impl Balancer {
    /// A balancer over `endpoints` (those of weight 0 are never picked), starting a fresh
    /// sequence.
    pub fn new(endpoints: &[Endpoint]) -> Self {
        let peers: Vec<(String, i64)> = endpoints
            .iter()
            .filter(|e| e.weight > 0)
            .map(|e| (e.addr.clone(), i64::from(e.weight)))
            .collect();
        let index: Vec<usize> = endpoints
            .iter()
            .enumerate()
            .filter(|(_, e)| e.weight > 0)
            .map(|(i, _)| i)
            .collect();
        let divisor = peers
            .iter()
            .fold(0u64, |g, (_, w)| gcd(g, *w as u64))
            .max(1);
        let period: u64 = peers.iter().map(|(_, w)| *w as u64 / divisor).sum();
        let mode = if peers.is_empty() {
            Mode::Empty
        } else if period <= MAX_PRECOMPUTED {
            let reduced: Vec<(String, i64)> = peers
                .iter()
                .map(|(a, w)| (a.clone(), *w / divisor as i64))
                .collect();
            let mut current = vec![0i64; reduced.len()];
            let order = (0..period)
                .filter_map(|_| smooth_step(&reduced, &mut current, |_| true))
                .map(|i| i as u32)
                .collect();
            Mode::Cycle {
                order,
                next: AtomicUsize::new(0),
            }
        } else {
            Mode::Live(Mutex::new(vec![0; peers.len()]))
        };
        Balancer {
            configured: endpoints.to_vec(),
            peers,
            index,
            mode,
        }
    }

    /// The next endpoint's address; `None` when the cluster has no endpoint of weight > 0
    /// (the caller answers 503 `NO_HEALTHY_UPSTREAM`).
    pub fn pick(&self) -> Option<&str> {
        self.pick_excluding(&[])
    }

    /// The next endpoint's address among those not in `tried` (addresses already tried for
    /// this request, e.g. for one retry after a connect failure); `None` when every pickable
    /// endpoint has been tried (or there is none).
    pub fn pick_excluding(&self, tried: &[&str]) -> Option<&str> {
        let allowed = |i: usize| !tried.contains(&self.peers[i].0.as_str());
        self.pick_peer(allowed).map(|i| self.peers[i].0.as_str())
    }

    /// The next endpoint in the weighted sequence that `allowed` admits (it is given the
    /// index into the configured list); returns that index. `None` when none is admitted.
    pub fn pick_where(&self, allowed: impl Fn(usize) -> bool) -> Option<usize> {
        self.pick_peer(|i| allowed(self.index[i]))
            .map(|i| self.index[i])
    }

    fn pick_peer(&self, allowed: impl Fn(usize) -> bool) -> Option<usize> {
        let index = match &self.mode {
            Mode::Empty => None,
            Mode::Cycle { order, next } => {
                let start = next.fetch_add(1, Ordering::Relaxed);
                (0..order.len())
                    .map(|k| order[(start.wrapping_add(k)) % order.len()] as usize)
                    .find(|&i| allowed(i))
            }
            Mode::Live(current) => {
                let mut current = current
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                smooth_step(&self.peers, &mut current, allowed)
            }
        };
        index
    }

    /// Whether `endpoints` is exactly this balancer's list (same addresses and weights in the
    /// same order): `true` means the gateway should keep this balancer, and its position in
    /// the sequence, across a snapshot reload.
    pub fn same_endpoints(&self, endpoints: &[Endpoint]) -> bool {
        self.configured == endpoints
    }

    /// The endpoints as configured (including those of weight 0).
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.configured
    }

    /// How many endpoints can be picked (weight > 0).
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether no endpoint can be picked.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn eps(list: &[(&str, u32)]) -> Vec<Endpoint> {
        list.iter()
            .map(|(a, w)| Endpoint {
                addr: a.to_string(),
                weight: *w,
            })
            .collect()
    }

    fn counts(b: &Balancer, n: usize) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for _ in 0..n {
            *m.entry(b.pick().unwrap().to_string()).or_default() += 1;
        }
        m
    }

    #[test]
    fn five_one_one_is_smooth() {
        let b = Balancer::new(&eps(&[("a", 5), ("b", 1), ("c", 1)]));
        let seq: Vec<&str> = (0..14).map(|_| b.pick().unwrap()).collect();
        assert_eq!(
            seq,
            ["a", "a", "b", "a", "c", "a", "a", "a", "a", "b", "a", "c", "a", "a"]
        );
        let c = counts(&b, 700);
        assert_eq!((c["a"], c["b"], c["c"]), (500, 100, 100));
    }

    #[test]
    fn common_factors_do_not_change_the_sequence() {
        let small = Balancer::new(&eps(&[("a", 5), ("b", 1), ("c", 1)]));
        let big = Balancer::new(&eps(&[("a", 500), ("b", 100), ("c", 100)]));
        for _ in 0..21 {
            assert_eq!(small.pick(), big.pick());
        }
    }

    #[test]
    fn large_weight_sums_run_live_with_the_same_algorithm() {
        let b = Balancer::new(&eps(&[("a", 5001), ("b", 1000), ("c", 1000)]));
        assert!(matches!(b.mode, Mode::Live(_)));
        let seq: Vec<&str> = (0..7).map(|_| b.pick().unwrap()).collect();
        assert_eq!(seq, ["a", "a", "b", "a", "c", "a", "a"]);
        let c = counts(&b, 7001 - 7);
        assert_eq!((c["a"], c["b"], c["c"]), (5001 - 5, 1000 - 1, 1000 - 1));
        assert_eq!(b.pick_excluding(&["a", "b"]), Some("c"));
        assert_eq!(b.pick_excluding(&["a", "b", "c"]), None);
    }

    #[test]
    fn single_endpoint() {
        let b = Balancer::new(&eps(&[("10.0.0.1:80", 3)]));
        for _ in 0..5 {
            assert_eq!(b.pick(), Some("10.0.0.1:80"));
        }
        assert_eq!(b.pick_excluding(&["10.0.0.1:80"]), None);
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn empty_and_all_drained() {
        let b = Balancer::new(&[]);
        assert_eq!(b.pick(), None);
        assert!(b.is_empty());
        let d = Balancer::new(&eps(&[("a", 0), ("b", 0)]));
        assert_eq!(d.pick(), None);
        assert_eq!(d.pick_excluding(&["a"]), None);
        assert!(d.is_empty());
    }

    #[test]
    fn zero_weight_is_never_picked() {
        let b = Balancer::new(&eps(&[("a", 1), ("z", 0), ("b", 1)]));
        let c = counts(&b, 100);
        assert_eq!((c["a"], c["b"]), (50, 50));
        assert!(!c.contains_key("z"));
    }

    #[test]
    fn pick_excluding_skips_tried() {
        let b = Balancer::new(&eps(&[("a", 5), ("b", 1), ("c", 1)]));
        for _ in 0..20 {
            let p = b.pick_excluding(&["a"]).unwrap();
            assert!(p == "b" || p == "c");
        }
        assert_eq!(b.pick_excluding(&["a", "c"]), Some("b"));
        assert_eq!(b.pick_excluding(&["a", "b", "c"]), None);
        assert_eq!(b.pick_excluding(&["x"]).map(str::len), Some(1));
    }

    #[test]
    fn concurrent_picks_keep_exact_proportions() {
        let b = Balancer::new(&eps(&[("a", 5), ("b", 1), ("c", 1)]));
        let totals: Vec<HashMap<String, usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(|| counts(&b, 700))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let sum = |k: &str| {
            totals
                .iter()
                .map(|m| m.get(k).copied().unwrap_or(0))
                .sum::<usize>()
        };
        assert_eq!((sum("a"), sum("b"), sum("c")), (2000, 400, 400));
    }

    #[test]
    fn same_endpoints_compares_addresses_and_weights_in_order() {
        let list = eps(&[("a", 5), ("b", 1)]);
        let b = Balancer::new(&list);
        assert!(b.same_endpoints(&list));
        assert!(!b.same_endpoints(&eps(&[("a", 5), ("b", 2)])));
        assert!(!b.same_endpoints(&eps(&[("b", 1), ("a", 5)])));
        assert!(!b.same_endpoints(&eps(&[("a", 5)])));
        assert_eq!(b.endpoints(), list.as_slice());
    }
}
