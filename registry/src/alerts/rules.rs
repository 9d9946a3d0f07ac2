//! Alert rules as the evaluator uses them: the `alerts/<name>` documents of the live tree
//! (`portico_control::v1::AlertRule`, checked by `portico_control::validate::check_alert`)
//! with their condition typed.

use crate::state::Shared;
use portico_control::v1;
use std::sync::Arc;

/// What a rule watches, and how its value compares with its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    /// The API's TP99 over the window, in milliseconds, above the threshold.
    Tp99MsAbove,
    /// The API's availability (non-5xx share) over the window below the threshold (a fraction).
    AvailabilityBelow,
    /// The API's requests per second over the window above the threshold.
    QpsAbove,
    /// The API's requests per second over the window below the threshold.
    QpsBelow,
    /// More gateways than the threshold (default 0) have the API's breaker open or half-open.
    BreakerOpen,
    /// More gateways than the threshold (default 0) are missing: registered but unreadable, or
    /// gone from ZooKeeper within the last [`super::evaluate::NODE_MEMORY`].
    NodeMissing,
    /// A gateway has served an outdated configuration for more than the threshold, in seconds.
    ConfigLagAbove,
}

impl Condition {
    /// The condition of a rule document's `condition` (one of `v1::ALERT_CONDITIONS`).
    pub fn parse(s: &str) -> Option<Condition> {
        Some(match s {
            "tp99_ms_above" => Condition::Tp99MsAbove,
            "availability_below" => Condition::AvailabilityBelow,
            "qps_above" => Condition::QpsAbove,
            "qps_below" => Condition::QpsBelow,
            "breaker_open" => Condition::BreakerOpen,
            "node_missing" => Condition::NodeMissing,
            "config_lag_above" => Condition::ConfigLagAbove,
            _ => return None,
        })
    }

    /// Its name in documents.
    pub fn name(self) -> &'static str {
        match self {
            Condition::Tp99MsAbove => "tp99_ms_above",
            Condition::AvailabilityBelow => "availability_below",
            Condition::QpsAbove => "qps_above",
            Condition::QpsBelow => "qps_below",
            Condition::BreakerOpen => "breaker_open",
            Condition::NodeMissing => "node_missing",
            Condition::ConfigLagAbove => "config_lag_above",
        }
    }

    /// Whether it watches the gateways rather than an API.
    pub fn is_gateway_wide(self) -> bool {
        matches!(self, Condition::NodeMissing | Condition::ConfigLagAbove)
    }

    /// Whether `value` breaks `threshold` (no value: no data, never).
    pub fn holds(self, value: Option<f64>, threshold: f64) -> bool {
        let Some(v) = value else { return false };
        match self {
            Condition::AvailabilityBelow | Condition::QpsBelow => v < threshold,
            _ => v > threshold,
        }
    }

    /// A sentence for notifications: `order.get: TP99 312.5 ms above 200 ms` while the
    /// value breaks the threshold, `order.get: TP99 150 ms, back at or under 200 ms` once it
    /// no longer does (a resolving alert: "8.1 requests/s below 1 requests/s" read wrong).
    pub fn describe(self, api: &str, value: Option<f64>, threshold: f64) -> String {
        let v = |unit: &str, scale: f64| match value {
            Some(v) => format!("{}{unit}", trim(v * scale)),
            None => "no data".to_owned(),
        };
        let breaking = value.is_none() || self.holds(value, threshold);
        let (above, below, more_than) = if breaking {
            (" above ", " below ", "more than")
        } else {
            (", back at or under ", ", back at or above ", "at most")
        };
        match self {
            Condition::Tp99MsAbove => {
                format!("{api}: TP99 {}{above}{} ms", v(" ms", 1.0), trim(threshold))
            }
            Condition::AvailabilityBelow => format!(
                "{api}: availability {}{below}{}%",
                v("%", 100.0),
                trim(threshold * 100.0)
            ),
            Condition::QpsAbove => format!(
                "{api}: {}{above}{} requests/s",
                v(" requests/s", 1.0),
                trim(threshold)
            ),
            Condition::QpsBelow => format!(
                "{api}: {}{below}{} requests/s",
                v(" requests/s", 1.0),
                trim(threshold)
            ),
            Condition::BreakerOpen => format!(
                "{api}: breaker open on {} gateway(s) ({more_than} {})",
                v("", 1.0),
                trim(threshold)
            ),
            Condition::NodeMissing => format!(
                "{} gateway(s) missing ({more_than} {})",
                v("", 1.0),
                trim(threshold)
            ),
            Condition::ConfigLagAbove => format!(
                "a gateway has served an outdated configuration for {} ({more_than} {} s)",
                v(" s", 1.0),
                trim(threshold)
            ),
        }
    }
}

/// A number with at most 3 decimals and no trailing zeros.
fn trim(v: f64) -> String {
    let s = format!("{:.3}", (v * 1000.0).round() / 1000.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

/// A rule, ready to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The document's name (`alerts/<name>`).
    pub name: String,
    /// The API id or `*` (`*` for gateway-wide conditions, whatever the document says).
    pub api: String,
    pub condition: Condition,
    /// The threshold (0 when a `breaker_open` or `node_missing` rule leaves it out).
    pub threshold: f64,
    pub for_s: u64,
    /// The severity (default `warning`).
    pub severity: String,
    pub receivers: Vec<v1::AlertReceiver>,
    pub description: Option<String>,
}

impl Rule {
    /// The rule of a checked document.
    pub fn of(name: &str, doc: &v1::AlertRule) -> Option<Rule> {
        let condition = Condition::parse(&doc.condition)?;
        Some(Rule {
            name: name.to_owned(),
            api: if condition.is_gateway_wide() {
                "*".to_owned()
            } else {
                doc.api.clone()
            },
            condition,
            threshold: doc.threshold.unwrap_or(0.0),
            for_s: doc.for_s,
            severity: doc.severity.clone().unwrap_or_else(|| "warning".to_owned()),
            receivers: doc.receivers.clone(),
            description: doc.description.clone(),
        })
    }
}

/// The live tree's rules (a rule that does not check out is skipped and reported).
pub async fn load(state: &Shared) -> Result<(Vec<Arc<Rule>>, Vec<String>), String> {
    let docs = state
        .store
        .list_docs("alerts")
        .await
        .map_err(|e| format!("cannot read the alert rules: {}", e.message))?;
    let mut rules = Vec::with_capacity(docs.len());
    let mut problems = Vec::new();
    for (name, doc) in docs {
        match portico_control::validate::check_alert(&name, &doc.data) {
            Ok(checked) => {
                if let Some(rule) = Rule::of(&name, &checked) {
                    rules.push(Arc::new(rule));
                }
            }
            Err(e) => problems.push(format!("alerts/{name}: {e}")),
        }
    }
    Ok((rules, problems))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_compare_and_describe() {
        for name in v1::ALERT_CONDITIONS {
            assert_eq!(Condition::parse(name).unwrap().name(), name);
        }
        assert!(Condition::Tp99MsAbove.holds(Some(201.0), 200.0));
        assert!(!Condition::Tp99MsAbove.holds(Some(200.0), 200.0));
        assert!(!Condition::Tp99MsAbove.holds(None, 0.0));
        assert!(Condition::AvailabilityBelow.holds(Some(0.98), 0.99));
        assert!(Condition::QpsBelow.holds(Some(0.0), 1.0));
        assert!(Condition::BreakerOpen.holds(Some(1.0), 0.0));
        assert_eq!(
            Condition::Tp99MsAbove.describe("order.get", Some(312.5), 200.0),
            "order.get: TP99 312.5 ms above 200 ms"
        );
        assert_eq!(
            Condition::AvailabilityBelow.describe("a", Some(0.98765), 0.999),
            "a: availability 98.765% below 99.9%"
        );
        assert_eq!(
            Condition::QpsAbove.describe("a", None, 5.0),
            "a: no data above 5 requests/s"
        );
        // Resolving: the value no longer breaks the threshold, and the sentence says so.
        assert_eq!(
            Condition::QpsBelow.describe("a", Some(8.1), 1.0),
            "a: 8.1 requests/s, back at or above 1 requests/s"
        );
        assert_eq!(
            Condition::Tp99MsAbove.describe("order.get", Some(150.0), 200.0),
            "order.get: TP99 150 ms, back at or under 200 ms"
        );
        assert_eq!(
            Condition::BreakerOpen.describe("a", Some(0.0), 0.0),
            "a: breaker open on 0 gateway(s) (at most 0)"
        );
    }

    #[test]
    fn rules_default_their_parts() {
        let doc: v1::AlertRule =
            serde_json::from_str(r#"{"api":"x","condition":"node_missing"}"#).unwrap();
        let r = Rule::of("gw", &doc).unwrap();
        assert_eq!(r.api, "*", "gateway-wide whatever the document says");
        assert_eq!((r.threshold, r.for_s), (0.0, 0));
        assert_eq!(r.severity, "warning");
    }
}
