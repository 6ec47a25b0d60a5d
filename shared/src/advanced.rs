//! Advanced load balancing (SPEC section 7, AL-1..AL-8): the pure math.
//!
//! Everything here is a pure function of its inputs (no clock, no state of its own except the
//! explicit [`DrainTracker`]), so the control thread, the simulator and the tests compute the
//! same weights. [`crate::state::PolicyState::snapshot`] turns the fractions into one weighted
//! Maglev table per client zone (CH-3), so the data path is unchanged: client zone -> choice ->
//! table -> backend, the same on every worker and every instance (CH-1).
//!
//! # Topology and distance
//!
//! [`Distances`] orders groups by locality from a client zone: the same zone (0) < another
//! zone of the same region (`1 + zone latency`, default 1) < another region
//! ([`OTHER_REGION`] + the configured latency between the two regions, or, without one,
//! [`UNLISTED_REGION`] + the region's position in [`Topology::region_order`], then in the order
//! regions first appear in `Model::zones`). A client without a zone (a regional subnet, or no
//! subnet) is in the balancer's own region, at distance 1 from each of its zones.
//!
//! # Capacity and demand
//!
//! A group's capacity is `per-endpoint capacity x healthy endpoints in the eligible set x
//! capacity_scaler`, and 0 when it is drained (scaler 0, or AL-6). Its *size* (the basis of
//! every proportional split) is the capacity, or `healthy endpoints x scaler` for an unbounded
//! group. Demand is the offered load per client zone, smoothed ([`ewma`]), in the service's
//! unit: new connections per second when any group has a rate capacity, tracked connections
//! when groups have connection capacities. A client zone with no measured demand gets a tiny
//! demand ([`EPSILON_DEMAND`]), so its weights are the *marginal* placement of its next flow.
//!
//! # Allocation ([`allocate`])
//!
//! The demand of all client zones is placed in a deterministic order, nearest first, each step
//! subtracting what earlier steps took from a group's capacity:
//!
//! 1. AL-5, preferred groups: each client fills them one by one in its latency order (ties by
//!    configuration order), up to capacity; clients at the same distance from a group share
//!    what is left in proportion to their remaining demand. Nearer clients come first.
//! 2. The algorithm, over the other groups:
//!    - AL-4 `WATERFALL_BY_ZONE`: the same sequential fill as step 1, group by group, nearest
//!      first (own zone, then the region's other zones, then other regions).
//!    - AL-1 `WATERFALL_BY_REGION`: per region, the clients of the region give a total demand
//!      D; every group's target is its share of D in proportion to capacity (`u x C_g`,
//!      `u = min(1, D / C_region)`, equal utilisation). Each client zone first takes its own
//!      zone's targets; the residual demand of every zone is spread over the region's spare
//!      targets in proportion to them (Envoy's zone-aware "residual" rule, with capacities
//!      in place of host counts). Only when the region is full (u = 1) does demand go on to
//!      the next nearest region.
//!    - AL-2 `SPRAY_TO_REGION`: per region, the clients' total demand is split over the
//!      region's groups in proportion to capacity (water-filling up to each capacity), so
//!      every client has the same split; excess goes to the next nearest region.
//!    - AL-3 `SPRAY_TO_WORLD`: the same over every group of every region.
//!
//!    Demand that leaves its region arrives at the next nearest region with groups (stage k
//!    is each client's k-th region), after that region's own clients, and is split there in
//!    proportion to the remaining capacity.
//! 3. AL-7: a group with healthy percentage h below T keeps `h / T` of what it was given; the
//!    displaced rest is placed again by steps 1 and 2 over the groups with spare capacity,
//!    degraded groups excluded ("the next groups in the algorithm's order"). What finds no
//!    spare capacity returns to the degraded groups (nothing is dropped, as in Envoy when the
//!    total availability is below 100%).
//!
//! A client's weights are its allocation normalised to 1: demand beyond every capacity
//! scales its allocation up (overload keeps each algorithm's shape). A client that got
//! nothing at all (everything full before it) falls back to its region's groups in proportion
//! to capacity, then to every group.
//!
//! # Damping
//!
//! Weights are a feed-forward function of the smoothed demand per client zone (which the
//! weights do not change) and of capacity and health. Two things keep them from moving with
//! every noisy sample: exponential smoothing of every measured load with time constant tau
//! ([`ewma`], `Damping::time_constant_ms`, default 5 s), and a hysteresis band
//! ([`exceeds_band`], `Damping::band`, default 0.02): a client zone's published weights are
//! replaced only when some group's share would move by more than the band, or when health,
//! drain state or configuration changed (then immediately).

use crate::model::{Algorithm, Model, ZoneId};
use crate::time::Time;
use hashbrown::HashMap;
use std::time::Duration;

/// Distance base of groups in another region than the client's.
pub const OTHER_REGION: u32 = 1 << 24;
/// Added to [`OTHER_REGION`] for region pairs without a configured latency (then the
/// region's position in the region order is added).
pub const UNLISTED_REGION: u32 = 1 << 20;
/// Largest zone latency that counts (keeps same-region distances below [`OTHER_REGION`]).
const MAX_ZONE_LATENCY: u32 = (1 << 23) - 1;

/// Demand given to client zones that have none measured (their weights are the marginal
/// placement of their next flow).
pub const EPSILON_DEMAND: f64 = 1e-9;

/// AL-6: a group with fewer than this percentage of its endpoints healthy is drained.
pub const DRAIN_BELOW_PCT: usize = 25;
/// AL-6: a drained group is undrained once at least this percentage is healthy...
pub const UNDRAIN_AT_PCT: usize = 35;
/// AL-6: ...continuously for this long.
pub const UNDRAIN_AFTER: Duration = Duration::from_secs(60);
/// AL-6: never more than this percentage of a service's groups is drained at once.
pub const MAX_DRAINED_PCT: usize = 50;

/// Scale of the integer Maglev weights: a group's fraction of a zone's traffic times this,
/// divided over its endpoints.
pub const WEIGHT_SCALE: f64 = 1_000_000.0;

/// A symmetric latency between two zones of one region, or between two regions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Latency {
    /// A zone or region name.
    pub a: String,
    /// A zone or region name.
    pub b: String,
    /// Latency (any unit, e.g. microseconds; only the order matters).
    pub latency: u32,
}

/// Locality configuration: how far regions and zones are from each other.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// Regions, nearest first, for region pairs without a latency. Regions not listed follow
    /// in the order they first appear in `Model::zones`. Empty (the default): that order.
    pub region_order: Vec<String>,
    /// Latencies between zones (same region) or regions.
    pub latencies: Vec<Latency>,
}

impl Topology {
    fn latency(&self, a: &str, b: &str) -> Option<u32> {
        self.latencies
            .iter()
            .find(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a))
            .map(|l| l.latency)
    }
}

/// The distance from every client zone (and the zone-less client) to every zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Distances {
    zones: usize,
    /// `(zones + 1) x zones`; the last row is the zone-less client.
    matrix: Vec<u32>,
    /// Region index of each zone.
    zone_region: Vec<usize>,
    /// Region index of the zone-less client (the balancer's own region).
    own_region: usize,
    /// Region names by index.
    regions: Vec<String>,
}

impl Distances {
    /// Distances for `model` under `topology`.
    pub fn new(model: &Model, topology: &Topology) -> Distances {
        let mut regions: Vec<String> = Vec::new();
        let index = |r: &str, regions: &mut Vec<String>| match regions.iter().position(|x| x == r) {
            Some(i) => i,
            None => {
                regions.push(r.to_string());
                regions.len() - 1
            }
        };
        let zone_region: Vec<usize> =
            model.zones.iter().map(|z| index(&z.region, &mut regions)).collect();
        let own_region = index(&model.region, &mut regions);
        // Region rank for the default order: listed first, then configuration order.
        let rank = |r: usize| -> u32 {
            let name = &regions[r];
            let pos = match topology.region_order.iter().position(|x| x == name) {
                Some(p) => p,
                None => topology.region_order.len() + r,
            };
            u32::try_from(pos).unwrap_or(u32::MAX >> 8).min(UNLISTED_REGION - 1)
        };
        let n = model.zones.len();
        let mut matrix = vec![0u32; (n + 1) * n];
        for c in 0..=n {
            let c_region = if c < n { zone_region[c] } else { own_region };
            for g in 0..n {
                let g_region = zone_region[g];
                let d = if c == g {
                    0
                } else if c_region == g_region {
                    let lat = if c < n {
                        topology.latency(&model.zones[c].name, &model.zones[g].name).unwrap_or(0)
                    } else {
                        0
                    };
                    1 + lat.min(MAX_ZONE_LATENCY)
                } else {
                    match topology.latency(&regions[c_region], &regions[g_region]) {
                        Some(l) => OTHER_REGION + l.min(UNLISTED_REGION - 1),
                        None => OTHER_REGION + UNLISTED_REGION + rank(g_region),
                    }
                };
                matrix[c * n + g] = d;
            }
        }
        Distances { zones: n, matrix, zone_region, own_region, regions }
    }

    /// The distance from a client in `client` (`None`: no zone, the balancer's own region) to
    /// a group in `group_zone`: 0 same zone < same region < other regions.
    pub fn distance(&self, client: Option<ZoneId>, group_zone: ZoneId) -> u32 {
        let c = client.map_or(self.zones, usize::from).min(self.zones);
        let g = usize::from(group_zone);
        if g >= self.zones {
            return u32::MAX;
        }
        self.matrix[c * self.zones + g]
    }

    /// The region index of a zone.
    pub fn zone_region(&self, zone: ZoneId) -> usize {
        self.zone_region.get(usize::from(zone)).copied().unwrap_or(self.own_region)
    }

    /// The region index of a client (`None`: the balancer's own region).
    pub fn client_region(&self, client: Option<ZoneId>) -> usize {
        client.map_or(self.own_region, |z| self.zone_region(z))
    }

    /// Region names by index.
    pub fn regions(&self) -> &[String] {
        &self.regions
    }
}

/// `distance(client_zone, group_zone)` for a model and topology (see [`Distances`]).
pub fn distance(
    model: &Model,
    topology: &Topology,
    client_zone: Option<ZoneId>,
    group_zone: ZoneId,
) -> u32 {
    Distances::new(model, topology).distance(client_zone, group_zone)
}

/// Measured load: of a group (what it received) or of a client zone (what it offered).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// New connections per second (over the measurement window).
    pub rate: f64,
    /// Tracked (live) connections.
    pub connections: f64,
}

/// Measured load of a group.
pub type GroupLoad = Load;
/// Offered load of a client zone.
pub type ClientLoad = Load;

/// The unit capacities and demand are compared in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum LoadUnit {
    /// New connections per second.
    #[default]
    Rate,
    /// Tracked connections.
    Connections,
}

impl Load {
    /// The value in `unit`.
    pub fn get(&self, unit: LoadUnit) -> f64 {
        match unit {
            LoadUnit::Rate => self.rate,
            LoadUnit::Connections => self.connections,
        }
    }
}

/// Exponential smoothing: the estimate after a `sample` taken `dt_ms` after the previous
/// one, with time constant `tau_ms` (`tau_ms == 0`: no smoothing).
pub fn ewma(prev: f64, sample: f64, dt_ms: u64, tau_ms: u32) -> f64 {
    if tau_ms == 0 {
        return sample;
    }
    #[allow(clippy::cast_precision_loss)] // milliseconds
    let alpha = 1.0 - (-(dt_ms as f64) / f64::from(tau_ms)).exp();
    prev + alpha * (sample - prev)
}

/// Hysteresis: true when some entry moves by more than `band`.
pub fn exceeds_band(old: &[f64], new: &[f64], band: f64) -> bool {
    old.len() != new.len() || old.iter().zip(new).any(|(a, b)| (a - b).abs() > band)
}

/// One group as the allocation sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupState {
    /// Its zone.
    pub zone: ZoneId,
    /// Capacity in the service's unit (`f64::INFINITY` when unbounded, 0 when it can take
    /// nothing: drained, scaler 0 or no healthy endpoint).
    pub capacity: f64,
    /// Basis of proportional splits (the capacity, or healthy endpoints x scaler when
    /// unbounded); 0 when it can take nothing.
    pub size: f64,
    /// Healthy percentage in [0, 100] (AL-7).
    pub healthy_pct: f64,
    /// A preferred group: filled up to its capacity first, in latency order (AL-5).
    pub preferred: bool,
}

impl GroupState {
    fn usable(&self) -> bool {
        self.capacity > 0.0 && self.size > 0.0
    }

    /// AL-7: the fraction of the traffic given to it that the group keeps under threshold
    /// `t` (percent): 1 when `h >= t`, else `h / t`.
    pub fn retained(&self, t: u8) -> f64 {
        let t = f64::from(t.max(1));
        if self.healthy_pct >= t {
            1.0
        } else {
            (self.healthy_pct / t).max(0.0)
        }
    }
}

/// One client zone's demand (one entry per client zone; `None` is the zone-less client).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientDemand {
    /// The client zone.
    pub zone: Option<ZoneId>,
    /// Offered load in the service's unit.
    pub demand: f64,
}

/// The result of [`allocate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    /// `fractions[c][g]`: the share of client `c`'s new connections that group `g` gets;
    /// each row sums to 1, or is all zero when no group can take anything.
    pub fractions: Vec<Vec<f64>>,
    /// Expected load per group (fractions times demand).
    pub load: Vec<f64>,
}

struct Ctx<'a> {
    algorithm: Algorithm,
    groups: &'a [GroupState],
    clients: &'a [ClientDemand],
    dist: &'a Distances,
    /// Region index of each group.
    group_region: Vec<usize>,
    /// Region index of each client.
    client_region: Vec<usize>,
}

/// What a placement works on.
struct Placement<'a> {
    /// Each client's demand not placed yet.
    rem: Vec<f64>,
    /// Each group's capacity left.
    avail: &'a mut [f64],
    /// `x[c][g]`: what client `c` has put on group `g`.
    x: Vec<Vec<f64>>,
}

impl Placement<'_> {
    /// The demand of `clients` not placed yet.
    fn remaining(&self, clients: &[usize]) -> f64 {
        clients.iter().map(|&c| self.rem[c]).sum()
    }
}

/// Place `demand` (per client) on groups with `avail` capacity left; returns what each client
/// put on each group. Demand that fits nowhere stays unplaced.
fn place(ctx: &Ctx<'_>, demand: &[f64], avail: &mut [f64]) -> Vec<Vec<f64>> {
    let ng = ctx.groups.len();
    let mut p =
        Placement { rem: demand.to_vec(), avail, x: vec![vec![0.0; ng]; ctx.clients.len()] };
    let preferred: Vec<bool> = ctx.groups.iter().map(|g| g.preferred && g.usable()).collect();
    let regular: Vec<bool> = ctx.groups.iter().map(|g| !g.preferred && g.usable()).collect();
    // AL-5: preferred groups first, in latency order, up to capacity.
    sequential_fill(ctx, &preferred, &mut p);
    match ctx.algorithm {
        Algorithm::WaterfallByZone => sequential_fill(ctx, &regular, &mut p),
        Algorithm::SprayToWorld => {
            let all: Vec<usize> = (0..ctx.clients.len()).collect();
            let groups: Vec<usize> = (0..ng).filter(|&g| regular[g]).collect();
            spray(ctx, &all, &groups, &mut p);
        }
        Algorithm::WaterfallByRegion | Algorithm::SprayToRegion => by_region(ctx, &regular, &mut p),
    }
    p.x
}

/// Sequential fill (AL-4 and AL-5): every client takes the groups in `mask` one by one in its
/// order of (distance, configuration order), up to their capacity. Pairs (distance, group)
/// are processed in ascending order over all clients, so nearer clients claim first; clients
/// at the same distance from a group share its capacity in proportion to their remaining
/// demand.
fn sequential_fill(ctx: &Ctx<'_>, mask: &[bool], p: &mut Placement<'_>) {
    let Placement { rem, avail, x } = p;
    let mut pairs: Vec<(u32, usize)> = Vec::new();
    for c in ctx.clients {
        for (g, gs) in ctx.groups.iter().enumerate() {
            if mask[g] {
                pairs.push((ctx.dist.distance(c.zone, gs.zone), g));
            }
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    for (d, g) in pairs {
        if avail[g] <= 0.0 {
            continue;
        }
        let at: Vec<usize> = (0..ctx.clients.len())
            .filter(|&c| {
                rem[c] > 0.0 && ctx.dist.distance(ctx.clients[c].zone, ctx.groups[g].zone) == d
            })
            .collect();
        let want: f64 = at.iter().map(|&c| rem[c]).sum();
        if want <= 0.0 {
            continue;
        }
        let give = avail[g].min(want);
        let ratio = give / want;
        for c in at {
            let share = if ratio >= 1.0 { rem[c] } else { rem[c] * ratio };
            x[c][g] += share;
            rem[c] = if ratio >= 1.0 { 0.0 } else { settle(rem[c], rem[c] - share) };
        }
        avail[g] -= give;
    }
}

/// Remaining demand after a step: rounding leftovers (below a billionth of what it was)
/// count as placed, so they never leak into a farther tier.
fn settle(before: f64, after: f64) -> f64 {
    if after <= before * 1e-9 {
        0.0
    } else {
        after
    }
}

/// Water-filling: split `amount` over `groups` in proportion to their size, none above its
/// `avail`. Returns the amount per group (index by group); the total may be below `amount`
/// when every group is full.
fn proportional_fill(ctx: &Ctx<'_>, amount: f64, groups: &[usize], avail: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; ctx.groups.len()];
    let mut active: Vec<usize> =
        groups.iter().copied().filter(|&g| avail[g] > 0.0 && ctx.groups[g].size > 0.0).collect();
    let mut left = amount;
    while left > 0.0 && !active.is_empty() {
        let total: f64 = active.iter().map(|&g| ctx.groups[g].size).sum();
        let lambda = left / total;
        let (full, open): (Vec<usize>, Vec<usize>) =
            active.iter().partition(|&&g| lambda * ctx.groups[g].size >= avail[g]);
        if full.is_empty() {
            for g in open {
                out[g] += lambda * ctx.groups[g].size;
            }
            break;
        }
        for g in full {
            out[g] += avail[g];
            left -= avail[g];
        }
        active = open;
    }
    out
}

/// Spray: the clients' total remaining demand is split over `groups` in proportion to size
/// (up to capacity); every client gets the same split.
fn spray(ctx: &Ctx<'_>, clients: &[usize], groups: &[usize], p: &mut Placement<'_>) {
    let total = p.remaining(clients);
    let Placement { rem, avail, x } = p;
    if total <= 0.0 || groups.is_empty() {
        return;
    }
    let placed = proportional_fill(ctx, total, groups, avail);
    let placed_total: f64 = placed.iter().sum();
    if placed_total <= 0.0 {
        return;
    }
    for &c in clients {
        let part = rem[c] / total;
        for &g in groups {
            x[c][g] += part * placed[g];
        }
        rem[c] = settle(rem[c], rem[c] - part * placed_total);
    }
    for &g in groups {
        avail[g] = (avail[g] - placed[g]).max(0.0);
    }
}

/// AL-1 and AL-2: stage 0 is each client's own region; stage k its k-th nearest other region
/// (regions without usable groups are skipped). Within a stage, regions are processed in
/// index order.
fn by_region(ctx: &Ctx<'_>, mask: &[bool], p: &mut Placement<'_>) {
    let nr = ctx.dist.regions().len();
    let region_groups: Vec<Vec<usize>> = (0..nr)
        .map(|r| (0..ctx.groups.len()).filter(|&g| mask[g] && ctx.group_region[g] == r).collect())
        .collect();
    // Each client's region order: own region, then the others by distance (then index).
    let orders: Vec<Vec<usize>> = ctx
        .clients
        .iter()
        .enumerate()
        .map(|(c, cd)| {
            let own = ctx.client_region[c];
            let mut others: Vec<(u32, usize)> = (0..nr)
                .filter(|&r| r != own && !region_groups[r].is_empty())
                .map(|r| {
                    let d = region_groups[r]
                        .iter()
                        .map(|&g| ctx.dist.distance(cd.zone, ctx.groups[g].zone))
                        .min()
                        .unwrap_or(u32::MAX);
                    (d, r)
                })
                .collect();
            others.sort_unstable();
            std::iter::once(own).chain(others.into_iter().map(|(_, r)| r)).collect()
        })
        .collect();
    for stage in 0..nr {
        for (r, in_region) in region_groups.iter().enumerate() {
            let clients: Vec<usize> = (0..ctx.clients.len())
                .filter(|&c| p.rem[c] > 0.0 && orders[c].get(stage) == Some(&r))
                .collect();
            if clients.is_empty() || in_region.is_empty() {
                continue;
            }
            if stage == 0 && ctx.algorithm == Algorithm::WaterfallByRegion {
                waterfall_region(ctx, &clients, in_region, p);
            } else {
                spray(ctx, &clients, in_region, p);
            }
        }
    }
}

/// AL-1 within the clients' own region: targets in proportion to capacity (equal
/// utilisation), each zone's own clients first, residual demand spread over the spare targets.
fn waterfall_region(ctx: &Ctx<'_>, clients: &[usize], groups: &[usize], p: &mut Placement<'_>) {
    let total = p.remaining(clients);
    let Placement { rem, avail, x } = p;
    let target = proportional_fill(ctx, total, groups, avail);
    let mut spare = target.clone();
    // Local first: each client zone takes its own zone's targets.
    for &c in clients {
        let Some(z) = ctx.clients[c].zone else { continue };
        let local: Vec<usize> =
            groups.iter().copied().filter(|&g| ctx.groups[g].zone == z && spare[g] > 0.0).collect();
        let room: f64 = local.iter().map(|&g| spare[g]).sum();
        if room <= 0.0 {
            continue;
        }
        let take = rem[c].min(room);
        for &g in &local {
            let part = take * spare[g] / room;
            x[c][g] += part;
            spare[g] -= part;
        }
        rem[c] = if take >= rem[c] { 0.0 } else { settle(rem[c], rem[c] - take) };
    }
    // Residual: spread over the region's spare targets, in proportion to them.
    let residual: f64 = clients.iter().map(|&c| rem[c]).sum();
    let room: f64 = groups.iter().map(|&g| spare[g].max(0.0)).sum();
    if residual > 0.0 && room > 0.0 {
        let moved = residual.min(room);
        for &c in clients {
            let share = rem[c] * moved / residual;
            for &g in groups {
                x[c][g] += share * spare[g].max(0.0) / room;
            }
            rem[c] = if moved >= residual { 0.0 } else { settle(rem[c], rem[c] - share) };
        }
        for &g in groups {
            spare[g] -= spare[g].max(0.0) * moved / room;
        }
    }
    for &g in groups {
        let used = target[g] - spare[g].max(0.0);
        avail[g] = (avail[g] - used).max(0.0);
    }
}

/// Compute every client zone's group fractions (AL-1..AL-5, AL-7; AL-6 is already folded into
/// the capacities). `threshold` is AL-7's T in percent. Pure and deterministic.
pub fn allocate(
    algorithm: Algorithm,
    threshold: u8,
    groups: &[GroupState],
    clients: &[ClientDemand],
    dist: &Distances,
) -> Allocation {
    let ctx = Ctx {
        algorithm,
        groups,
        clients,
        dist,
        group_region: groups.iter().map(|g| dist.zone_region(g.zone)).collect(),
        client_region: clients.iter().map(|c| dist.client_region(c.zone)).collect(),
    };
    let ng = groups.len();
    let demand: Vec<f64> = clients.iter().map(|c| c.demand.max(EPSILON_DEMAND)).collect();
    let capacity: Vec<f64> =
        groups.iter().map(|g| if g.usable() { g.capacity } else { 0.0 }).collect();
    let mut avail = capacity.clone();
    let mut x = place(&ctx, &demand, &mut avail);
    // AL-7: degraded groups keep h / T; the rest is placed again elsewhere.
    let retained: Vec<f64> = groups.iter().map(|g| g.retained(threshold)).collect();
    if retained.iter().zip(&capacity).any(|(&r, &c)| r < 1.0 && c > 0.0) {
        let displaced: Vec<Vec<f64>> = x
            .iter()
            .map(|row| row.iter().zip(&retained).map(|(v, r)| v * (1.0 - r)).collect())
            .collect();
        let displaced_total: Vec<f64> = displaced.iter().map(|row| row.iter().sum()).collect();
        for row in &mut x {
            for (v, r) in row.iter_mut().zip(&retained) {
                *v *= r;
            }
        }
        let mut avail2: Vec<f64> = (0..ng)
            .map(|g| {
                if retained[g] < 1.0 {
                    0.0
                } else {
                    (capacity[g] - x.iter().map(|row| row[g]).sum::<f64>()).max(0.0)
                }
            })
            .collect();
        let x2 = place(&ctx, &displaced_total, &mut avail2);
        for c in 0..clients.len() {
            let placed: f64 = x2[c].iter().sum();
            let back = displaced_total[c] - placed;
            for g in 0..ng {
                x[c][g] += x2[c][g];
                if back > 0.0 && displaced_total[c] > 0.0 {
                    x[c][g] += back * displaced[c][g] / displaced_total[c];
                }
            }
        }
    }
    // Normalise; fall back for clients that got nothing.
    let mut fractions = Vec::with_capacity(clients.len());
    for (c, row) in x.iter().enumerate() {
        let sum: f64 = row.iter().sum();
        let f: Vec<f64> = if sum > 0.0 {
            row.iter().map(|v| v / sum).collect()
        } else {
            let own = ctx.client_region[c];
            let in_region: Vec<f64> = (0..ng)
                .map(|g| {
                    if capacity[g] > 0.0 && ctx.group_region[g] == own {
                        groups[g].size
                    } else {
                        0.0
                    }
                })
                .collect();
            let basis = if in_region.iter().sum::<f64>() > 0.0 {
                in_region
            } else {
                (0..ng).map(|g| if capacity[g] > 0.0 { groups[g].size } else { 0.0 }).collect()
            };
            let total: f64 = basis.iter().sum();
            if total > 0.0 {
                basis.iter().map(|v| v / total).collect()
            } else {
                vec![0.0; ng]
            }
        };
        fractions.push(f);
    }
    let load = (0..ng)
        .map(|g| fractions.iter().zip(clients).map(|(f, c)| f[g] * c.demand.max(0.0)).sum())
        .collect();
    Allocation { fractions, load }
}

/// AL-6 auto capacity drain, one service: which groups are drained, with the hysteresis
/// timers. Drained: fewer than 25% of the group's endpoints healthy. Undrained: at least 35%
/// healthy, observed continuously for 60 s. At most 50% of the groups (rounded down) are
/// drained at once: groups already drained keep their place (the least healthy first if
/// there are too many), then new candidates are taken least healthy first, ties in
/// configuration order.
#[derive(Clone, Debug, Default)]
pub struct DrainTracker {
    groups: HashMap<String, DrainGroup>,
}

#[derive(Clone, Copy, Debug, Default)]
struct DrainGroup {
    drained: bool,
    recovering_since: Option<Time>,
}

/// One group as AL-6 sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainInput<'a> {
    /// Group name.
    pub name: &'a str,
    /// Healthy endpoints.
    pub healthy: usize,
    /// Configured endpoints (operator-drained ones excluded).
    pub configured: usize,
}

impl DrainTracker {
    /// Update at `now` and return, per input group, whether it is drained. With `enabled`
    /// false nothing is drained and the timers are forgotten.
    pub fn update(&mut self, enabled: bool, groups: &[DrainInput<'_>], now: Time) -> Vec<bool> {
        if !enabled {
            self.groups.clear();
            return vec![false; groups.len()];
        }
        self.groups.retain(|name, _| groups.iter().any(|g| g.name == name));
        let counted = groups.iter().filter(|g| g.configured > 0).count();
        let max_drained = counted * MAX_DRAINED_PCT / 100;
        let mut staying = Vec::new();
        let mut candidates = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            let st = self.groups.entry(g.name.to_string()).or_default();
            if g.configured == 0 {
                *st = DrainGroup::default();
                continue;
            }
            if st.drained {
                if g.healthy * 100 >= UNDRAIN_AT_PCT * g.configured {
                    let since = *st.recovering_since.get_or_insert(now);
                    if now.since(since) >= UNDRAIN_AFTER {
                        *st = DrainGroup::default();
                        continue;
                    }
                } else {
                    st.recovering_since = None;
                }
                staying.push(i);
            } else if g.healthy * 100 < DRAIN_BELOW_PCT * g.configured {
                candidates.push(i);
            }
        }
        // Least healthy first (exact: a/b < c/d <=> a*d < c*b), then configuration order.
        let by_health = |&a: &usize, &b: &usize| {
            let (ga, gb) = (&groups[a], &groups[b]);
            (ga.healthy * gb.configured).cmp(&(gb.healthy * ga.configured)).then(a.cmp(&b))
        };
        staying.sort_by(by_health);
        candidates.sort_by(by_health);
        let mut out = vec![false; groups.len()];
        let mut count = 0;
        for i in staying {
            let st = self.groups.entry(groups[i].name.to_string()).or_default();
            if count < max_drained {
                out[i] = true;
                count += 1;
            } else {
                *st = DrainGroup::default();
            }
        }
        for i in candidates {
            if count < max_drained {
                let st = self.groups.entry(groups[i].name.to_string()).or_default();
                *st = DrainGroup { drained: true, recovering_since: None };
                out[i] = true;
                count += 1;
            }
        }
        out
    }
}

/// Integer Maglev weights for one group's endpoints: the group's fraction of a zone's traffic
/// spread evenly over its `endpoints` (0 when it rounds to nothing).
pub fn endpoint_weight(fraction: f64, endpoints: usize) -> u32 {
    if endpoints == 0 || fraction <= 0.0 {
        return 0;
    }
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let w = (fraction * WEIGHT_SCALE / endpoints as f64).round() as u32;
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Zone;

    fn model() -> Model {
        let mut m = Model::empty();
        m.region = "r1".into();
        for (z, r) in [("a", "r1"), ("b", "r1"), ("c", "r1"), ("x", "r2"), ("y", "r3")] {
            m.zones.push(Zone { name: z.into(), region: r.into() });
        }
        m
    }

    #[test]
    fn distance_orders_zone_region_world() {
        let m = model();
        let t = Topology::default();
        let d = Distances::new(&m, &t);
        assert_eq!(d.distance(Some(0), 0), 0);
        assert_eq!(d.distance(Some(0), 1), 1);
        assert_eq!(d.distance(None, 1), 1);
        assert!(d.distance(Some(0), 3) > d.distance(Some(0), 2));
        // Default: other regions in configuration order (r2 before r3).
        assert!(d.distance(Some(0), 3) < d.distance(Some(0), 4));
        // A latency table reverses it; zone latencies order zones within a region.
        let t = Topology {
            region_order: vec![],
            latencies: vec![
                Latency { a: "r1".into(), b: "r3".into(), latency: 10 },
                Latency { a: "r2".into(), b: "r1".into(), latency: 50 },
                Latency { a: "a".into(), b: "c".into(), latency: 2 },
            ],
        };
        let d = Distances::new(&m, &t);
        assert!(d.distance(Some(0), 4) < d.distance(Some(0), 3));
        assert!(d.distance(Some(0), 1) < d.distance(Some(0), 2));
        assert!(d.distance(Some(2), 0) < OTHER_REGION);
        // A region order list.
        let t = Topology { region_order: vec!["r3".into()], latencies: vec![] };
        let d = Distances::new(&m, &t);
        assert!(d.distance(Some(0), 4) < d.distance(Some(0), 3));
    }

    #[test]
    fn ewma_and_band() {
        let v = ewma(0.0, 100.0, 5000, 5000);
        assert!((v - 63.212).abs() < 0.01);
        assert_eq!(ewma(3.0, 7.0, 1000, 0), 7.0);
        assert!(!exceeds_band(&[0.5, 0.5], &[0.51, 0.49], 0.02));
        assert!(exceeds_band(&[0.5, 0.5], &[0.53, 0.47], 0.02));
    }

    #[test]
    fn endpoint_weights() {
        assert_eq!(endpoint_weight(0.5, 4), 125_000);
        assert_eq!(endpoint_weight(0.0, 4), 0);
        assert_eq!(endpoint_weight(0.5, 0), 0);
    }
}
