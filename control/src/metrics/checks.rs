//! The health checks: probes by result and their duration, per (backend, check).

use super::backends::backend_labels;
use super::scrape::{Labels, Scrape};
use crate::health::TargetStatus;
use prometheus_client::metrics::MetricType::{Counter, Histogram};

pub(super) fn checks(s: &mut Scrape, checks: &[TargetStatus]) {
    let labels = |t: &TargetStatus| -> Labels {
        let mut l = backend_labels(&t.key);
        l.push(("check", t.check.clone()));
        l
    };
    let f = s.family("spillway_health_check_probes", "Health-check probes, by result.", Counter);
    for t in checks {
        for (result, n) in t.probes.iter() {
            let mut l = labels(t);
            l.push(("result", result.to_owned()));
            f.add(l, n);
        }
    }
    let f = s.family(
        "spillway_health_check_duration_seconds",
        "Duration of health-check probes (timeouts count as the time waited).",
        Histogram,
    );
    for t in checks {
        f.add_histogram(labels(t), t.latency_sum.as_secs_f64(), t.latency_count);
    }
}
