//! What one scrape writes, as plain data: families of samples, encoded by `prometheus-client`
//! only once everything is gathered (so that no lock is held while encoding).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::fmt;

/// One sample's value.
#[derive(Clone, Copy, Debug)]
pub(super) enum Value {
    Int(u64),
    /// A gauge with a fractional value.
    Float(f64),
    /// A histogram from a sum and a count only (one `+Inf` bucket).
    Histogram {
        sum: f64,
        count: u64,
    },
}

/// Labels of one sample.
pub(super) type Labels = Vec<(&'static str, String)>;

/// One metric family with its samples.
#[derive(Debug)]
pub(super) struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    samples: Vec<(Labels, Value)>,
}

/// Everything one scrape writes, families in the order they are exposed.
#[derive(Debug, Default)]
pub(super) struct Scrape(Vec<Family>);

impl Scrape {
    /// A new family, exposed after those already added; one without samples is left out.
    pub(super) fn family(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: MetricType,
    ) -> &mut Family {
        self.0.push(Family { name, help, kind, samples: Vec::new() });
        let last = self.0.len() - 1;
        &mut self.0[last]
    }
}

impl Family {
    pub(super) fn add(&mut self, labels: Labels, v: u64) -> &mut Family {
        self.samples.push((labels, Value::Int(v)));
        self
    }

    pub(super) fn add_f(&mut self, labels: Labels, v: f64) -> &mut Family {
        self.samples.push((labels, Value::Float(v)));
        self
    }

    pub(super) fn add_histogram(&mut self, labels: Labels, sum: f64, count: u64) -> &mut Family {
        self.samples.push((labels, Value::Histogram { sum, count }));
        self
    }
}

fn encode_value(kind: MetricType, v: Value, mut m: MetricEncoder<'_>) -> fmt::Result {
    match (kind, v) {
        (MetricType::Counter, Value::Int(n)) => m.encode_counter::<NoLabelSet, u64, u64>(&n, None),
        (_, Value::Int(n)) => m.encode_gauge(&n),
        (_, Value::Float(x)) => m.encode_gauge(&x),
        (_, Value::Histogram { sum, count }) => {
            m.encode_histogram::<NoLabelSet>(sum, count, &[], None)
        }
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        for f in &self.0 {
            if f.samples.is_empty() {
                continue;
            }
            let mut m = encoder.encode_descriptor(f.name, f.help, None, f.kind)?;
            for (labels, v) in &f.samples {
                encode_value(f.kind, *v, m.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}
