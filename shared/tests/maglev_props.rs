//! Properties of the weighted Maglev table (SPEC CH-1..CH-4).
//!
//! Case counts are kept small for the large tables (N = 1000, M = 65537) so the whole crate's
//! `cargo test` stays fast in the dev profile. `maglev_quality_report` (ignored) prints the
//! disruption and imbalance figures: `cargo test -p spillway-core --release --test
//! maglev_props -- --ignored --nocapture`.

use proptest::prelude::*;
use spillway_core::addr::Addr;
use spillway_core::flow::{FlowHasher, DEFAULT_HASH_SEED};
use spillway_core::maglev::{
    backend_identity, slots_moved, MaglevMember, MaglevTable, DEFAULT_TABLE_SIZE, TABLE_SIZES,
};

/// Backends 10.x.y.z:80, ids 0..n, identities from the deployment hasher keyed by `seed`.
fn backends(n: usize, seed: u64, weight: impl Fn(usize) -> u32) -> Vec<MaglevMember> {
    let hasher = FlowHasher::new(seed);
    (0..n)
        .map(|i| {
            let b = u32::try_from(i).unwrap().to_be_bytes();
            MaglevMember {
                id: u16::try_from(i).unwrap(),
                identity: backend_identity(&hasher, Addr::v4(10, b[1], b[2], b[3]), 80),
                weight: weight(i),
            }
        })
        .collect()
}

/// Members with arbitrary identities (proptest input).
fn members_from(identities: &[u64], weights: &[u32]) -> Vec<MaglevMember> {
    identities
        .iter()
        .zip(weights.iter().cycle())
        .enumerate()
        .map(|(i, (&identity, &weight))| MaglevMember {
            id: u16::try_from(i).unwrap(),
            identity,
            weight,
        })
        .collect()
}

/// Entries owned by each id 0..n.
fn counts(t: &MaglevTable, n: usize) -> Vec<u64> {
    let mut c = vec![0u64; n];
    for &e in t.entries() {
        c[usize::from(e)] += 1;
    }
    c
}

/// Positions whose owner changed between two owners that are both in `survivors`
/// (CH-2's "extra disruption").
fn moved_between_survivors(
    a: &MaglevTable,
    b: &MaglevTable,
    survivor: impl Fn(u16) -> bool,
) -> usize {
    a.entries()
        .iter()
        .zip(b.entries())
        .filter(|(&x, &y)| x != y && survivor(x) && survivor(y))
        .count()
}

/// Deterministic Miller-Rabin for n < 3,215,031,751 (bases 2, 3, 5, 7): an independent
/// check of the sizes, not the crate's trial division.
fn miller_rabin(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    for p in [2u64, 3, 5, 7] {
        if n % p == 0 {
            return n == p;
        }
    }
    let (mut d, mut s) = (n - 1, 0);
    while d % 2 == 0 {
        d /= 2;
        s += 1;
    }
    let pow = |mut b: u64, mut e: u64| {
        let mut r = 1u64;
        b %= n;
        while e > 0 {
            if e & 1 == 1 {
                r = r * b % n;
            }
            b = b * b % n;
            e >>= 1;
        }
        r
    };
    'bases: for a in [2u64, 3, 5, 7] {
        let mut x = pow(a, d);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..s {
            x = x * x % n;
            if x == n - 1 {
                continue 'bases;
            }
        }
        return false;
    }
    true
}

#[test]
fn table_sizes_are_prime_and_ascending() {
    assert!(TABLE_SIZES.contains(&DEFAULT_TABLE_SIZE));
    assert_eq!(DEFAULT_TABLE_SIZE, 65537);
    for &m in TABLE_SIZES {
        assert!(miller_rabin(u64::from(m)), "{m} is not prime");
        assert!(spillway_core::maglev::is_prime(m), "{m}");
    }
    assert!(TABLE_SIZES.windows(2).all(|w| w[0] < w[1]));
    // The crate's own check agrees with known primes and composites.
    for (n, prime) in [(0, false), (1, false), (2, true), (9, false), (65536, false), (65537, true)]
    {
        assert_eq!(spillway_core::maglev::is_prime(n), prime, "{n}");
    }
    assert!(!spillway_core::maglev::is_prime(65537 * 3));
}

/// CH-1: pinned table. The values come from `maglev_reference.py` (next to this file), an
/// independent Python implementation of the method in the module doc over the reference C
/// xxHash (`XXH3_64bits_withSeed`), not from this crate: `python3
/// shared/tests/maglev_reference.py --pinned` prints them (three backends 10.0.0.1..3:80,
/// weights 1, 2, 3, default seed, M = 251), and `ch_1_tables_match_the_python_reference`
/// checks that the script still computes them and this crate the same whole table.
#[test]
fn ch_1_known_members_give_a_pinned_table() {
    let hasher = FlowHasher::new(DEFAULT_HASH_SEED);
    assert_eq!(backend_identity(&hasher, Addr::v4(10, 0, 0, 1), 80), 0xa6f3_ed7c_eb2d_a1be);
    let members: Vec<MaglevMember> = (0..3u8)
        .map(|i| MaglevMember {
            id: u16::from(i),
            identity: backend_identity(&hasher, Addr::v4(10, 0, 0, i + 1), 80),
            weight: u32::from(i) + 1,
        })
        .collect();
    assert_eq!(members[1].identity, 0x67b5_64bf_ed84_5a86);
    assert_eq!(members[2].identity, 0xcc11_5bf2_0de7_a5cf);
    let t = MaglevTable::build(&members, 251);
    let first32: [u16; 32] = [
        2, 2, 0, 1, 0, 1, 0, 0, 2, 1, 2, 1, 2, 2, 2, 2, 0, 1, 2, 2, 2, 2, 2, 0, 1, 2, 1, 2, 2, 1,
        1, 2,
    ];
    assert_eq!(&t.entries()[..32], &first32);
    // CH-3: 251 * (1, 2, 3) / 6 = 41.8, 83.7, 125.5.
    assert_eq!(counts(&t, 3), vec![42, 84, 125]);
    assert_eq!(t.entry_counts(), vec![(0, 42), (1, 84), (2, 125)]);
}

/// A reference case: deployment seed, table size, members as (address, port, weight).
type Case = (u64, u32, Vec<(Addr, u16, u32)>);
/// What the reference computes for a case: the members' identities and the whole table.
type Reference = (Vec<u64>, Vec<u16>);

/// Runs `maglev_reference.py` on `cases`: for each case, the identities and the whole table
/// it computes.
fn python_reference(cases: &[Case]) -> Vec<Reference> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/maglev_reference.py");
    let mut input = String::new();
    for (seed, size, members) in cases {
        input.push_str(&format!("{seed} {size}"));
        for (addr, port, weight) in members {
            input.push_str(&format!(" {},{port},{weight}", addr.to_ip()));
        }
        input.push('\n');
    }
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("python3 {script}: {e} (python3 is needed: scripts/install-deps.sh)")
        });
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "python3 {script} failed: {stderr}{stdout}");
    let values = |line: Option<&str>, tag: &str| -> Vec<String> {
        let line = line.unwrap_or_else(|| panic!("no {tag:?} line in {stdout}"));
        let rest = line.strip_prefix(tag).unwrap_or_else(|| panic!("{line:?} is not {tag:?}"));
        rest.split_whitespace().map(str::to_owned).collect()
    };
    let mut lines = stdout.lines();
    let results: Vec<Reference> = cases
        .iter()
        .map(|_| {
            let ids = values(lines.next(), "identities ");
            let entries = values(lines.next(), "entries ");
            (
                ids.iter().map(|h| u64::from_str_radix(h, 16).unwrap()).collect(),
                entries.iter().map(|e| e.parse().unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(lines.next(), None, "more output than cases: {stdout}");
    results
}

/// CH-1..CH-3 against an independent implementation: the Python reference (see
/// `ch_1_known_members_give_a_pinned_table`) computes the identities and the whole table of
/// member sets with uneven and zero weights, IPv4 and IPv6, several sizes and seeds; this crate
/// must compute the same, entry for entry. The first case is the pinned one.
#[test]
fn ch_1_tables_match_the_python_reference() {
    let v4 = |i: u8| Addr::v4(10, 0, 0, i);
    let v6 = |i: u16| {
        let mut b = [0u8; 16];
        b[..2].copy_from_slice(&0xfd00u16.to_be_bytes());
        b[12..14].copy_from_slice(&1u16.to_be_bytes());
        b[14..].copy_from_slice(&i.to_be_bytes());
        Addr(b)
    };
    let cases: Vec<Case> = vec![
        (DEFAULT_HASH_SEED, 251, (1..=3).map(|i| (v4(i), 80, u32::from(i))).collect()),
        (
            0x1234_5678,
            509,
            [1, 4, 2, 0, 3, 1, 1].iter().zip(1u8..).map(|(&w, i)| (v4(i), 80, w)).collect(),
        ),
        (DEFAULT_HASH_SEED, 2039, (1..=5).map(|i| (v6(i), 8080 + i, 1)).collect()),
        (DEFAULT_HASH_SEED, 251, vec![(v4(9), 443, 7)]),
        (
            0xdead_beef_0bad_cafe,
            4093,
            (1..=40u8).map(|i| (v4(i), 80, 1 + u32::from(i % 4))).collect(),
        ),
    ];
    let reference = python_reference(&cases);
    for ((seed, size, members), (ids, entries)) in cases.iter().zip(&reference) {
        let hasher = FlowHasher::new(*seed);
        let built: Vec<MaglevMember> = members
            .iter()
            .enumerate()
            .map(|(i, &(addr, port, weight))| MaglevMember {
                id: u16::try_from(i).unwrap(),
                identity: backend_identity(&hasher, addr, port),
                weight,
            })
            .collect();
        let mine: Vec<u64> = built.iter().map(|m| m.identity).collect();
        assert_eq!(&mine, ids, "identities, seed {seed:#x}");
        let t = MaglevTable::build(&built, *size);
        assert_eq!(t.entries(), &entries[..], "table of seed {seed:#x}, M = {size}: {members:?}");
    }
    // The pin above is what the reference computes.
    let (ids, entries) = &reference[0];
    assert_eq!(ids, &[0xa6f3_ed7c_eb2d_a1be, 0x67b5_64bf_ed84_5a86, 0xcc11_5bf2_0de7_a5cf]);
    assert_eq!(
        &entries[..32],
        &[
            2, 2, 0, 1, 0, 1, 0, 0, 2, 1, 2, 1, 2, 2, 2, 2, 0, 1, 2, 2, 2, 2, 2, 0, 1, 2, 1, 2, 2,
            1, 1, 2
        ]
    );
}

#[test]
fn ch_1_same_inputs_same_table() {
    let members = backends(1000, DEFAULT_HASH_SEED, |i| 1 + u32::try_from(i % 4).unwrap());
    let a = MaglevTable::build(&members, DEFAULT_TABLE_SIZE);
    let b = MaglevTable::build(&members, DEFAULT_TABLE_SIZE);
    assert_eq!(a.entries(), b.entries());
    assert_eq!(slots_moved(&a, &b), 0);
}

#[test]
fn ch_4_different_seeds_give_different_tables() {
    // Same backends, different deployment keys: other permutations, another table.
    let a = MaglevTable::build(&backends(100, DEFAULT_HASH_SEED, |_| 1), DEFAULT_TABLE_SIZE);
    let b = MaglevTable::build(&backends(100, 0x1234_5678, |_| 1), DEFAULT_TABLE_SIZE);
    // Two unrelated tables of 100 members agree on about 1/100 of the positions.
    assert!(slots_moved(&a, &b) > 60_000, "{}", slots_moved(&a, &b));
}

#[test]
fn ch_3_uniform_weights_give_floor_or_ceil_of_m_over_n() {
    // The paper's property: each backend owns floor(M/N) or ceil(M/N) entries, so with
    // M > 100 N every share is within 1% of 1/N.
    for n in [1usize, 7, 100, 500, 655] {
        let t = MaglevTable::build(&backends(n, DEFAULT_HASH_SEED, |_| 1), DEFAULT_TABLE_SIZE);
        let m = u64::from(DEFAULT_TABLE_SIZE);
        let n64 = n as u64;
        for (id, c) in counts(&t, n).into_iter().enumerate() {
            assert!(c == m / n64 || c == m.div_ceil(n64), "n={n} id={id} count={c}");
            let rel = (c as f64 - m as f64 / n as f64).abs() / (m as f64 / n as f64);
            assert!(rel <= 0.01, "n={n} id={id} rel={rel}");
        }
    }
}

/// CH-3 with weights 1..=4: every backend's entry count `c_i` is within the fill's bound of
/// `e_i = M * w_i / S` (S = sum(w), see the module doc): `-(w_i / w_max + N * w_i / S) < c_i - e_i
/// < 1 + w_i / w_max`. We size M as the smallest listed prime with `M >= 200 * S / min(w)`, the
/// analogue, for uneven weights, of the paper's `M > 100 N` rule: each of the bound's three
/// terms is then at most 1/200 of `e_i`, so every share is within 1.5% of its weight's.
fn check_weighted_shares(weights: &[u32]) {
    let n = weights.len();
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    let min_w = u64::from(*weights.iter().min().unwrap());
    let max_w = f64::from(*weights.iter().max().unwrap());
    let m = *TABLE_SIZES.iter().find(|&&m| u64::from(m) * min_w >= 200 * total).unwrap();
    let members = backends(n, DEFAULT_HASH_SEED, |i| weights[i]);
    let t = MaglevTable::build(&members, m);
    for (i, c) in counts(&t, n).into_iter().enumerate() {
        let w = f64::from(weights[i]);
        let expected = f64::from(m) * w / total as f64;
        let (below, above) = (w / max_w + n as f64 * w / total as f64, 1.0 + w / max_w);
        let err = c as f64 - expected;
        assert!(
            -below < err && err < above,
            "M={m} id={i} w={w} count={c} expected={expected}: not within (-{below}, {above})"
        );
        assert!(err.abs() / expected <= 0.015, "M={m} id={i} relative error {}", err / expected);
    }
}

#[test]
fn ch_3_weights_1_to_4_give_proportional_shares() {
    let weights: Vec<u32> = (0..100).map(|i| 1 + i % 4).collect();
    check_weighted_shares(&weights);
    check_weighted_shares(&[1, 2, 3, 4]);
    check_weighted_shares(&[1, 1, 1, 100]);
    // A case where the heaviest member ends 2.14 entries short of its weight's share (M = 8191):
    // more than 2, within the bound (3.29 here).
    check_weighted_shares(&[1, 2, 1, 1, 3, 2, 4, 1, 1, 2, 4, 1, 1, 2, 1, 1]);
}

#[test]
fn ch_3_weight_zero_is_not_in_the_table() {
    let members = backends(10, DEFAULT_HASH_SEED, |i| u32::from(i != 3));
    let t = MaglevTable::build(&members, DEFAULT_TABLE_SIZE);
    assert!(!t.entries().contains(&3));
    assert_eq!(t.members(), 9);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// CH-1: the table depends on the members as a set, not on their order.
    #[test]
    fn ch_1_member_order_does_not_matter(
        identities in prop::collection::vec(any::<u64>(), 1..150),
        weights in prop::collection::vec(1u32..=4, 1..8),
        size_index in 0usize..6,
        shuffle_seed in any::<u64>(),
    ) {
        let m = TABLE_SIZES[size_index + 3]; // 2039 .. 65537
        let members = members_from(&identities, &weights);
        let mut shuffled = members.clone();
        // Fisher-Yates with a splitmix64 stream.
        let mut s = shuffle_seed;
        for i in (1..shuffled.len()).rev() {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let z = (s ^ (s >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            shuffled.swap(i, usize::try_from(z % (i as u64 + 1)).unwrap());
        }
        let a = MaglevTable::build(&members, m);
        let b = MaglevTable::build(&shuffled, m);
        prop_assert_eq!(a.entries(), b.entries());
    }

    /// CH-3: with weights 1..=4, shares are proportional (see `check_weighted_shares`).
    #[test]
    fn ch_3_weighted_shares_are_proportional(weights in prop::collection::vec(1u32..=4, 1..60)) {
        check_weighted_shares(&weights);
    }
}

/// CH-2 check for removing member `gone` from `n` uniform backends at M = 65537.
fn check_removal(n: usize, gone: usize, seed: u64) {
    let m = DEFAULT_TABLE_SIZE;
    let before = backends(n, seed, |_| 1);
    let mut after = before.clone();
    after.remove(gone);
    let (a, b) = (MaglevTable::build(&before, m), MaglevTable::build(&after, m));
    let gone_id = u16::try_from(gone).unwrap();
    // The removed backend's slots all go to others.
    assert!(!b.entries().contains(&gone_id));
    // Extra disruption: slots moved between survivors, at most 1.5% of the table.
    let extra = moved_between_survivors(&a, &b, |id| id != gone_id);
    assert!(extra * 1000 <= m as usize * 15, "n={n} extra={extra} ({:.3}%)", pct(extra));
    // Everything else that moved is exactly the removed backend's share.
    let share = a.entries().iter().filter(|&&e| e == gone_id).count();
    assert_eq!(slots_moved(&a, &b), share + extra);
}

/// CH-2 check for adding member number `n` to `n` uniform backends at M = 65537.
fn check_addition(n: usize, seed: u64) {
    let m = DEFAULT_TABLE_SIZE;
    let after = backends(n + 1, seed, |_| 1);
    let before = after[..n].to_vec();
    let (a, b) = (MaglevTable::build(&before, m), MaglevTable::build(&after, m));
    let new_id = u16::try_from(n).unwrap();
    let gained = b.entries().iter().filter(|&&e| e == new_id).count();
    // About M / (N + 1): exactly floor or ceil with equal weights.
    let fair = m as usize / (n + 1);
    assert!(gained == fair || gained == fair + 1, "n={n} gained={gained} fair={fair}");
    let extra = moved_between_survivors(&a, &b, |id| id != new_id);
    assert!(extra * 1000 <= m as usize * 15, "n={n} extra={extra} ({:.3}%)", pct(extra));
    assert_eq!(slots_moved(&a, &b), gained + extra);
}

fn pct(slots: usize) -> f64 {
    100.0 * slots as f64 / f64::from(DEFAULT_TABLE_SIZE)
}

#[test]
fn ch_2_removing_one_backend_moves_little() {
    // The sizes of the spec, including the N ~ 400 peak; one trial each (more in proptest).
    for (n, gone) in [(10, 3), (100, 57), (400, 123), (1000, 999)] {
        check_removal(n, gone, DEFAULT_HASH_SEED);
    }
}

#[test]
fn ch_2_adding_one_backend_moves_about_m_over_n_to_it() {
    for n in [9, 99, 399, 999] {
        check_addition(n, DEFAULT_HASH_SEED);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// CH-2: removing any one of N <= 1000 backends (random deployment seed).
    #[test]
    fn ch_2_removal_disruption_is_bounded(n in 2usize..=1000, pick in any::<prop::sample::Index>(), seed in any::<u64>()) {
        check_removal(n, pick.index(n), seed);
    }

    /// CH-2: adding one backend to N - 1 <= 999 backends (random deployment seed).
    #[test]
    fn ch_2_addition_disruption_is_bounded(n in 1usize..1000, seed in any::<u64>()) {
        check_addition(n, seed);
    }
}

/// CH-2 / CH-3 figures for the report: extra disruption when one of N backends is removed
/// (M = 65537, several trials with random victims and seeds) and max/avg entries per backend.
#[test]
#[ignore = "report, prints figures; run with --release --ignored --nocapture"]
fn maglev_quality_report() {
    const TRIALS: u64 = 20;
    let m = DEFAULT_TABLE_SIZE;
    println!("| N | removal: extra moved avg % | max % | total moved avg % | max/avg entries | min/avg |");
    println!("|---|---|---|---|---|---|");
    for n in [10usize, 100, 400, 1000] {
        let (mut sum_extra, mut max_extra, mut sum_total) = (0usize, 0usize, 0usize);
        let (mut worst_max, mut worst_min) = (0f64, f64::MAX);
        for trial in 0..TRIALS {
            let seed = DEFAULT_HASH_SEED ^ trial.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let before = backends(n, seed, |_| 1);
            let gone = usize::try_from(seed % n as u64).unwrap();
            let mut after = before.clone();
            after.remove(gone);
            let (a, b) = (MaglevTable::build(&before, m), MaglevTable::build(&after, m));
            let gone_id = u16::try_from(gone).unwrap();
            let extra = moved_between_survivors(&a, &b, |id| id != gone_id);
            sum_extra += extra;
            max_extra = max_extra.max(extra);
            sum_total += slots_moved(&a, &b);
            let c = counts(&a, n);
            let avg = f64::from(m) / n as f64;
            worst_max = worst_max.max(*c.iter().max().unwrap() as f64 / avg);
            worst_min = worst_min.min(*c.iter().min().unwrap() as f64 / avg);
        }
        println!(
            "| {n} | {:.3} | {:.3} | {:.3} | {:.4} | {:.4} |",
            pct(sum_extra) / TRIALS as f64,
            pct(max_extra),
            pct(sum_total) / TRIALS as f64,
            worst_max,
            worst_min
        );
    }
    // Weighted 1..=4, N = 1000 at M = 65537 and 655373: worst relative error of any share.
    for m in [DEFAULT_TABLE_SIZE, 655_373] {
        let members = backends(1000, DEFAULT_HASH_SEED, |i| 1 + u32::try_from(i % 4).unwrap());
        let t = MaglevTable::build(&members, m);
        let total: u32 = members.iter().map(|x| x.weight).sum();
        let mut worst_rel = 0f64;
        let mut worst_abs = 0f64;
        for (i, c) in counts(&t, 1000).into_iter().enumerate() {
            let expected = f64::from(m) * f64::from(members[i].weight) / f64::from(total);
            worst_abs = worst_abs.max((c as f64 - expected).abs());
            worst_rel = worst_rel.max((c as f64 - expected).abs() / expected);
        }
        println!(
            "weighted 1..=4, N=1000, M={m}: worst |count - expected| = {worst_abs:.2} entries, \
             worst relative error = {:.3}%",
            100.0 * worst_rel
        );
    }
}
