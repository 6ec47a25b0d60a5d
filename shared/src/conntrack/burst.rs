//! The staged lookup/insert pipeline: a burst of packets asks the table for their entries in
//! stages, so that the cache misses of different packets overlap instead of following one
//! another (the idea of DPDK's `rte_hash_lookup_bulk`, and of l3fwd and VPP).
//!
//! The caller (the data plane's burst loop) keeps one record per packet in its own type and
//! says, through [`Pending::ask`], what each packet asks of the table: a lookup that reads its
//! home way's record first ([`Ask::Home`], the common packet), a lookup that reads its bucket
//! header first ([`Ask::Lookup`]), a new connection's insert ([`Ask::Insert`]) or nothing. A
//! lookup's [`Hint`] lives in that record, and the stages write it. The caller runs the stages
//! and decides only *when*; this module decides what each stage reads and prefetches. This crate
//! has no `unsafe`, so the caller passes the prefetch instruction as `prefetch`.
//!
//! | stage | when the caller runs it | what it does |
//! |---|---|---|
//! | [`Burst::new`] | at the start of a burst | takes the table's load once |
//! | [`Burst::prefetch_first`] | after staging a group of packets | the first line of each: the home record (`Home`), the primary's header (`Lookup`, `Insert`; from 7/8 load also an insert's secondary header) |
//! | [`Burst::probe`] | a group or more behind, in the first pass | once those lines have arrived: a home record with the key's signature becomes the hint, else its header is prefetched (probed after the tail); a header's signatures are matched, the hint kept and its record prefetched (or the secondary's header when the primary has overflowed); inserts are left for after the tail |
//! | [`Burst::probe_tail`] | after the first pass, on the packets it did not probe | the same, and the inserts' next lines now (the record the insert writes, or the secondary's header) |
//! | [`Burst::finish`] | after the tail, before the packets are decided | the second probes: headers of lookups that missed their home way, then secondaries' headers; the inserts left from the first pass; then, for inserts into full buckets, the headers a move reads and, once those are in, the move's lines (the move is found and remembered for the insert here: it changes the table's plan, not its entries) |
//!
//! Each stage is a loop over the burst's records; `probe` must be called on consecutive
//! slices from the burst's first packet (the first pass), `probe_tail` on the rest.
//!
//! # Why the stages are as they are
//!
//! - A lookup reads one header and one record; a hit in the home way, one record. Prefetching a
//!   group's first lines back to back lets their address translations and miss buffers overlap;
//!   probing a group or more behind gives each line a group's staging to arrive.
//! - An insert writes a record whose store would otherwise miss, and the next load that must
//!   wait for the stores before it waits for that miss: its line is prefetched once the header
//!   says which way it takes.
//! - **The load rule** (one place: [`Shard::nearly_full`]): below 7/8 load an insert reads its
//!   secondary's header only when its primary is full (1% of the inserts at half load, 5% at 60%,
//!   a third at 80%), so that header is prefetched only once the primary's header says so; from
//!   7/8 load most inserts read it, and it is prefetched with the primary's in the first stage.
//! - Inserts into two full buckets (a tenth at 80% load, a third at 90%) read up to sixteen more
//!   headers for the move that makes room, then the moving record and its target way: those
//!   lines are asked for all such inserts of the burst at once, and only for them (their bits
//!   are kept by their place in the burst), so that the misses overlap and no other insert pays
//!   a mispredicted branch. In a table that is evicting (most crowded inserts found nothing to
//!   move), the record the eviction reads comes first.
//! - Nothing is prefetched for an insert the flood guard will most likely refuse.
//! - The rare steps (second probes, inserts into full buckets) are out of line: the burst
//!   loop's registers stay the common packet's.
//!
//! A hint is never trusted (the module doc of [`super`]): a stage that finds a stale line
//! costs only time, never a wrong entry.

use super::layout::{home_way, Head, Record};
use super::room::PlannedMove;
use super::{sig_of, Hint, Shard, Slot, PLANNED_MOVES, WAYS};

/// What one packet of a burst asks of the table ([`Pending::ask`]).
#[derive(Debug)]
pub enum Ask<'a> {
    /// Nothing: the packet is not looked up nor makes an entry.
    Nothing,
    /// A lookup of the key of hash `hash` that reads the record of the key's home way first
    /// (three entries in four are there at half load); `hint` receives where the entry
    /// probably is.
    Home {
        /// The key's hash ([`super::key_hash`]).
        hash: u64,
        /// Where the entry probably is, for [`Shard::hinted_hit`]; written by the stages.
        hint: &'a mut Hint,
    },
    /// A lookup of the key of hash `hash` that reads its primary bucket's header first.
    Lookup {
        /// The key's hash.
        hash: u64,
        /// Where the entry probably is; written by the stages.
        hint: &'a mut Hint,
    },
    /// A new connection's entry, made when the packet is decided (a new connection's SYN is
    /// not looked up first).
    Insert {
        /// The key's hash.
        hash: u64,
    },
}

/// A packet's record in the caller's burst: what it asks of the table.
pub trait Pending {
    /// What this packet asks of the table. Called at every stage: cheap, and the same answer
    /// each time within a burst.
    fn ask(&mut self) -> Ask<'_>;
}

/// The table's state of one burst between its stages (module doc). Small and on the stack.
#[derive(Clone, Copy, Debug)]
pub struct Burst {
    /// The table was at least 7/8 full at the burst's start ([`Shard::nearly_full`]); no
    /// entry is made before the last pass, so it holds for the whole pipeline.
    nearly_full: bool,
    /// A `Home` lookup's key was not in its home way: its header is on its way.
    headers: bool,
    /// A lookup's key was not in its primary bucket, which has overflowed: the secondary's
    /// header is on its way.
    secondary: bool,
    /// How many packets from the burst's start the first pass probed.
    probed: usize,
    /// The first pass left an insert for [`Burst::finish`].
    deferred: bool,
    /// An insert has a step left after the tail: below 7/8 load, its primary is full (its
    /// secondary's header is on its way); from 7/8 on, both are.
    step_left: bool,
}

impl Burst {
    /// The start of a burst on `shard`.
    #[inline(always)]
    pub fn new(shard: &Shard) -> Burst {
        Burst {
            nearly_full: shard.nearly_full(),
            headers: false,
            secondary: false,
            probed: 0,
            deferred: false,
            step_left: false,
        }
    }

    /// Stage 1, after a group of packets is staged: prefetch the first line each reads.
    #[inline(always)]
    pub fn prefetch_first<T: Pending>(
        &self,
        shard: &Shard,
        group: &mut [T],
        mut prefetch: impl FnMut(*const u8),
    ) {
        // The table's bounds read once for the group: between prefetches the compiler would
        // read them again for every packet (4 instructions per packet).
        let lines = FirstLines::of(shard);
        for item in group {
            match item.ask() {
                Ask::Home { hash, .. } => prefetch(lines.home(hash)),
                Ask::Lookup { hash, .. } => prefetch(lines.header(hash)),
                Ask::Insert { hash } => {
                    if self.nearly_full {
                        shard.prefetch_secondary_header(hash, &mut prefetch);
                    }
                    prefetch(lines.header(hash));
                }
                Ask::Nothing => {}
            }
        }
    }

    /// Stage 2, in the first pass, a group or more behind [`Burst::prefetch_first`]: once the
    /// first lines have arrived, the lookups' hints and next lines; the inserts are left for
    /// [`Burst::finish`]. Called on consecutive slices from the burst's first packet.
    #[inline(always)]
    pub fn probe<T: Pending>(
        &mut self,
        shard: &Shard,
        items: &mut [T],
        prefetch: impl FnMut(*const u8),
    ) {
        self.probed += items.len();
        self.probe_items::<T, true>(shard, items, prefetch);
    }

    /// Stage 2 for the packets the first pass did not probe (the tail): the same, and the
    /// inserts' next lines now.
    #[inline(always)]
    pub fn probe_tail<T: Pending>(
        &mut self,
        shard: &Shard,
        items: &mut [T],
        prefetch: impl FnMut(*const u8),
    ) {
        self.probe_items::<T, false>(shard, items, prefetch);
    }

    #[inline(always)]
    fn probe_items<T: Pending, const FIRST_PASS: bool>(
        &mut self,
        shard: &Shard,
        items: &mut [T],
        mut prefetch: impl FnMut(*const u8),
    ) {
        for item in items {
            match item.ask() {
                Ask::Home { hash, hint } => {
                    *hint = shard.probe_home(hash);
                    if *hint == Hint::NONE {
                        prefetch(shard.head_line(shard.bucket_index(hash)));
                        self.headers = true;
                    }
                }
                Ask::Lookup { hash, hint } => {
                    let (h, line) = shard.probe_header(hash, &mut self.secondary);
                    *hint = h;
                    prefetch(line);
                }
                Ask::Insert { .. } if FIRST_PASS => self.deferred = true,
                Ask::Insert { hash } => {
                    self.step_left |= shard.insert_lines_primary(hash, &mut prefetch);
                }
                Ask::Nothing => {}
            }
        }
    }

    /// Stage 3, after the tail and before the packets are decided, on the whole burst: the
    /// second probes of the lookups that need them, the inserts left from the first pass, and
    /// the steps of inserts into full buckets, including the moves that will make room for
    /// them (found now and remembered by `shard` for those inserts).
    #[inline(always)]
    pub fn finish<T: Pending, P: FnMut(*const u8) + Copy>(
        &mut self,
        shard: &mut Shard,
        items: &mut [T],
        prefetch: P,
    ) {
        if self.headers {
            probe_headers(items, shard, &mut self.secondary, prefetch);
        }
        if self.secondary {
            probe_secondaries(items, shard, prefetch);
        }
        if self.deferred {
            let first_pass = self.probed.min(items.len());
            self.step_left |= insert_lines_deferred(&mut items[..first_pass], shard, prefetch);
        }
        if self.step_left {
            insert_steps(items, shard, self.nearly_full, prefetch);
        }
    }
}

/// The lookups of `Home` kind whose key was not in its home way: once their bucket headers are
/// in cache, hint the way whose signature matches and prefetch its record (setting `secondary`
/// when the key may be in its secondary bucket).
#[inline(never)]
fn probe_headers<T: Pending>(
    items: &mut [T],
    shard: &Shard,
    secondary: &mut bool,
    mut prefetch: impl FnMut(*const u8),
) {
    for item in items {
        if let Ask::Home { hash, hint } = item.ask() {
            if *hint == Hint::NONE {
                let (h, line) = shard.probe_header(hash, secondary);
                *hint = h;
                prefetch(line);
            }
        }
    }
}

/// The second probe of the lookups whose key was not in its primary bucket, which has
/// overflowed: once the secondary's header is in cache, hint the way whose signature matches
/// there and prefetch its record, which the lookup would otherwise read with nothing
/// overlapping its miss.
#[inline(never)]
fn probe_secondaries<T: Pending>(
    items: &mut [T],
    shard: &Shard,
    mut prefetch: impl FnMut(*const u8),
) {
    for item in items {
        let (Ask::Home { hash, hint } | Ask::Lookup { hash, hint }) = item.ask() else {
            continue;
        };
        if *hint == Hint::NONE {
            let (h, line) = shard.probe_secondary(hash);
            *hint = h;
            prefetch(line);
        }
    }
}

/// The next lines of the inserts the first pass left (their headers have had the whole
/// first pass to arrive). True when one has a step left.
#[inline(never)]
fn insert_lines_deferred<T: Pending>(
    items: &mut [T],
    shard: &Shard,
    mut prefetch: impl FnMut(*const u8),
) -> bool {
    let mut step_left = false;
    for item in items {
        if let Ask::Insert { hash } = item.ask() {
            step_left |= shard.insert_lines_primary(hash, &mut prefetch);
        }
    }
    step_left
}

/// The steps of the inserts that have one left after the tail, for all of them at once: which
/// find both candidate buckets full (below 7/8 load after the secondary's header: those whose
/// primary is full alone are asked, found from the primaries' headers without a branch; from
/// 7/8 load from both headers), then the lines of the moves of those alone. (One call out of
/// line: inside the burst loop these steps cost an established packet 3.7 instructions.)
#[inline(never)]
fn insert_steps<T: Pending, P: FnMut(*const u8) + Copy>(
    items: &mut [T],
    shard: &mut Shard,
    nearly_full: bool,
    prefetch: P,
) {
    let crowded = if nearly_full {
        inserts_where(items, |hash| shard.both_full(hash))
    } else {
        let primary_full = inserts_where(items, |hash| shard.primary_full(hash));
        let mut crowded = 0;
        for_each_insert(items, primary_full, |i, hash| {
            crowded |= u64::from(shard.insert_lines_secondary(hash, prefetch)) << i;
        });
        crowded
    };
    if crowded != 0 {
        plan_moves(items, shard, crowded, prefetch);
    }
}

/// For the inserts into two full buckets (`crowded`, a bit each by their place in the burst),
/// once the headers of their entries' other buckets have arrived: the move that will make room
/// for each, remembered for its insert, and its lines prefetched (or the record the eviction
/// reads first). Only those inserts are asked: asking every new connection, whose buckets are
/// full or not as good as at random, cost two thirds of a mispredicted branch per new
/// connection at 85% load.
#[cold]
#[inline(never)]
fn plan_moves<T: Pending>(
    items: &mut [T],
    shard: &mut Shard,
    crowded: u64,
    mut prefetch: impl FnMut(*const u8),
) {
    for_each_insert(items, crowded, |_, hash| shard.plan_move(hash, &mut prefetch));
}

// A burst's inserts are a bit each in a `u64`.
const MAX_BITS: usize = 64;

/// The inserts of a burst (by their key hash) for which `test` holds, a bit each by their
/// place in the burst, set without a branch on what `test` says. (At most the first 64.)
#[inline(always)]
fn inserts_where<T: Pending>(items: &mut [T], mut test: impl FnMut(u64) -> bool) -> u64 {
    let mut bits = 0;
    for (i, item) in items.iter_mut().take(MAX_BITS).enumerate() {
        if let Ask::Insert { hash } = item.ask() {
            bits |= u64::from(test(hash)) << i;
        }
    }
    bits
}

/// Calls `f` with the place and key hash of each insert whose bit is set in `bits`, in order.
#[inline(always)]
fn for_each_insert<T: Pending>(items: &mut [T], mut bits: u64, mut f: impl FnMut(usize, u64)) {
    while bits != 0 {
        let i = bits.trailing_zeros() as usize;
        if let Some(Ask::Insert { hash }) = items.get_mut(i).map(Pending::ask) {
            f(i, hash);
        }
        bits &= bits - 1;
    }
}

/// The lines a burst's first stage names, with the table's bounds taken once.
#[derive(Clone, Copy, Debug)]
struct FirstLines {
    heads: *const u8,
    records: *const u8,
    mask: usize,
}

impl FirstLines {
    #[inline(always)]
    fn of(shard: &Shard) -> FirstLines {
        FirstLines {
            heads: shard.heads.as_ptr().cast::<u8>(),
            records: shard.records.as_ptr().cast::<u8>(),
            mask: shard.heads.len() - 1,
        }
    }

    /// The header of `hash`'s primary bucket. (An address computed, never read through.)
    #[inline(always)]
    fn header(&self, hash: u64) -> *const u8 {
        self.heads.wrapping_add(((hash as usize) & self.mask) * size_of::<Head>())
    }

    /// The record of `hash`'s home way in its primary bucket.
    #[inline(always)]
    fn home(&self, hash: u64) -> *const u8 {
        let way = ((hash as usize) & self.mask) * WAYS + home_way(hash);
        self.records.wrapping_add(way * size_of::<Record>())
    }
}

/// What each stage reads of the table and the lines it names: private to the pipeline (the
/// tests of the table check the line addresses).
impl Shard {
    /// The load rule: is the table at least 7/8 full? From there on most inserts read their
    /// secondary bucket, and its header is prefetched with the primary's; below, only for the
    /// inserts whose primary is full, once that is known.
    #[inline(always)]
    pub(super) fn nearly_full(&self) -> bool {
        self.len * 8 >= self.heads.len() * WAYS * 7
    }

    /// The line of bucket `b`'s header. (An address computed, never read through: no bounds
    /// check; `b` is a bucket index.)
    #[inline(always)]
    pub(super) fn head_line(&self, b: usize) -> *const u8 {
        self.heads.as_ptr().wrapping_add(b).cast::<u8>()
    }

    /// The line of way `w` of bucket `b` (computed as [`Shard::head_line`] is: the bounds
    /// checks of indexing were four of the probe's instructions per packet).
    #[inline(always)]
    pub(super) fn record_line(&self, b: usize, w: usize) -> *const u8 {
        self.records.as_ptr().cast::<Record>().wrapping_add(b * WAYS + w).cast::<u8>()
    }

    /// From 7/8 load, an insert's secondary header, with its primary's (out of line: the
    /// burst loop's registers stay the common packet's).
    #[inline(never)]
    fn prefetch_secondary_header(&self, hash: u64, mut prefetch: impl FnMut(*const u8)) {
        if !self.likely_refused() {
            prefetch(self.head_line(self.candidate_buckets(hash).1));
        }
    }

    /// Once the home way's record is in cache: the home way as a hint when its record has the
    /// key's signature (the key itself is compared where the hint is used), else
    /// [`Hint::NONE`] (the entry is in another way, in its secondary bucket, or absent). Reads
    /// that record only.
    #[inline(always)]
    fn probe_home(&self, hash: u64) -> Hint {
        let (p, w) = (self.bucket_index(hash), home_way(hash));
        match self.records.get(p) {
            Some(ways) if ways[w].sig == sig_of(hash) => Hint(Slot::new(p, w).0),
            _ => Hint::NONE,
        }
    }

    /// Once the primary's header is in cache: the first way whose signature matches as a hint,
    /// and its record's line; else, the primary overflowed, no hint and the secondary's header
    /// (and `*secondary` set: [`Shard::probe_secondary`] goes on once it has arrived); else no
    /// hint and a null line (the key is in neither bucket).
    #[inline]
    fn probe_header(&self, hash: u64, secondary: &mut bool) -> (Hint, *const u8) {
        let p = self.bucket_index(hash);
        let head = &self.heads[p];
        let m = head.match_mask(sig_of(hash));
        if m != 0 {
            let w = m.trailing_zeros() as usize;
            (Hint(Slot::new(p, w).0), self.record_line(p, w))
        } else if head.overflow != 0 {
            *secondary = true;
            (Hint::NONE, self.head_line(self.secondary_index(p, hash)))
        } else {
            (Hint::NONE, std::ptr::null())
        }
    }

    /// The second half of [`Shard::probe_header`] for a key not in its primary bucket, whose
    /// primary has overflowed: once the secondary's header is in cache, the first way there
    /// whose signature matches, as a hint, and its record's line. No hint and a null line when
    /// the primary has not overflowed or the secondary has no such way.
    #[inline]
    fn probe_secondary(&self, hash: u64) -> (Hint, *const u8) {
        let p = self.bucket_index(hash);
        if self.heads[p].overflow == 0 {
            return (Hint::NONE, std::ptr::null());
        }
        let s = self.secondary_index(p, hash);
        let m = self.heads[s].match_mask(sig_of(hash));
        if m == 0 {
            return (Hint::NONE, std::ptr::null());
        }
        let w = m.trailing_zeros() as usize;
        (Hint(Slot::new(s, w).0), self.record_line(s, w))
    }

    /// Once the primary bucket's header is in cache: calls `prefetch` with the line an insert
    /// of the key reads or writes next. The record of the primary's first way whose signature
    /// matches (the key may be there: a SYN reusing a tracked flow's ports); else that of the
    /// way the new entry takes in the primary; else, the primary full, the secondary's header,
    /// and returns true: [`Shard::insert_lines_secondary`] goes on once it has arrived. From 7/8
    /// load, where the secondary's header was prefetched with the primary's, it goes on at
    /// once instead, and returns true only when both buckets are full (the move's lines next).
    /// Nothing when the flood guard will most likely refuse the connection.
    #[inline(always)]
    fn insert_lines_primary(&self, hash: u64, mut prefetch: impl FnMut(*const u8)) -> bool {
        if self.likely_refused() {
            return false;
        }
        let p = self.bucket_index(hash);
        let head = &self.heads[p];
        let m = head.match_mask(sig_of(hash));
        if m != 0 {
            prefetch(self.record_line(p, m.trailing_zeros() as usize));
            return false;
        }
        if let Some(w) = head.free_way(home_way(hash)) {
            prefetch(self.record_line(p, w));
            return false;
        }
        if self.nearly_full() {
            return self.secondary_lines(p, hash, prefetch);
        }
        prefetch(self.head_line(self.secondary_index(p, hash)));
        true
    }

    /// After [`Shard::insert_lines_primary`] returned true for `hash` and the secondary's
    /// header has arrived: the record of the secondary's first empty way; else, both buckets
    /// full, the headers the move that makes room reads (`relocation_heads`), and true. Does
    /// nothing for a key whose primary has room.
    #[inline(always)]
    fn insert_lines_secondary(&self, hash: u64, prefetch: impl FnMut(*const u8)) -> bool {
        if self.likely_refused() {
            return false;
        }
        let p = self.bucket_index(hash);
        let head = &self.heads[p];
        if head.match_mask(sig_of(hash)) != 0 || head.empty_way().is_some() {
            return false;
        }
        self.secondary_lines(p, hash, prefetch)
    }

    /// Is the primary bucket of `hash` full? Once its header is in cache; without a branch.
    #[inline(always)]
    fn primary_full(&self, hash: u64) -> bool {
        self.heads[self.bucket_index(hash)].match_mask(0) == 0
    }

    /// Are both candidate buckets of `hash` full (the insert then moves an entry or evicts
    /// one)? Once both headers are in cache, and without a branch on either: in a filling
    /// table the answers are as good as random. (In a table of one bucket, false: no move.)
    #[inline(always)]
    fn both_full(&self, hash: u64) -> bool {
        let p = self.bucket_index(hash);
        let s = self.secondary_index(p, hash);
        (self.heads[p].match_mask(0) == 0) & (self.heads[s].match_mask(0) == 0) & (s != p)
    }

    /// The insert's lines once its primary `p` is known full and its secondary's header is in
    /// cache: the record of the secondary's first empty way, or, both full, the move's headers
    /// (`relocation_heads`), and true then.
    #[inline(always)]
    fn secondary_lines(&self, p: usize, hash: u64, mut prefetch: impl FnMut(*const u8)) -> bool {
        let s = self.secondary_index(p, hash);
        if let Some(w) = self.heads[s].empty_way() {
            prefetch(self.record_line(s, w));
            return false;
        }
        self.relocation_heads(p, prefetch);
        true
    }

    /// Both candidate buckets full: the header of each of the primary's 16 entries' other
    /// bucket not known to be full, which the move's search reads; in a table without a flood
    /// guard that is evicting ([`Shard::evicting`]), where the move seldom finds room, the
    /// record the eviction reads first instead (the headers come with the move's lines).
    /// Out of line: rare below 75% load.
    #[cold]
    #[inline(never)]
    fn relocation_heads(&self, p: usize, mut prefetch: impl FnMut(*const u8)) {
        if self.evicting() {
            prefetch(self.eviction_line(p));
        } else {
            self.other_heads_of(p, prefetch);
        }
    }

    /// Calls `prefetch` with the header of the other bucket of every entry of the full bucket
    /// `b`, way by way (from the signatures: no record read); for one known to be full, with
    /// `b`'s own header instead (in cache: no line is read).
    fn other_heads_of(&self, b: usize, mut prefetch: impl FnMut(*const u8)) {
        for &sig in &self.heads[b].sig {
            let to = self.other_bucket(b, sig);
            // `b`'s own header in place of one known full, by arithmetic rather than a branch:
            // in a filling table whether a bucket is known full is as good as random, and the
            // branch mispredicted about a third of the time.
            let skip = usize::from(self.known_full(to)).wrapping_neg();
            prefetch(self.head_line(to ^ ((to ^ b) & skip)));
        }
    }

    /// The record the eviction from the full bucket `p` reads first (the way whose header
    /// says it was seen longest ago), as of the table's latest insert or sweep.
    fn eviction_line(&self, p: usize) -> *const u8 {
        self.record_line(p, self.heads[p].oldest_way(super::layout::coarse(self.clock)))
    }

    /// For an insert into two full buckets, once the headers its move reads have arrived: if
    /// both are still full, finds the move the insert will make (the first of the primary's
    /// 16 entries whose other bucket has an empty way, as the insert's own search would),
    /// remembers it for the insert, which takes it if it still holds without searching again,
    /// and prefetches the record that moves and the way it goes to; or, none able to move and
    /// no flood guard, the record the eviction reads first (the headers of the search, in a
    /// table that is evicting). Nothing when the flood guard will most likely refuse.
    #[inline]
    pub(super) fn plan_move(&mut self, hash: u64, mut prefetch: impl FnMut(*const u8)) {
        let full = |b: usize| self.heads[b].empty_way().is_none();
        let p = self.bucket_index(hash);
        if !full(p) {
            return;
        }
        let s = self.secondary_index(p, hash);
        if s == p || !full(s) || self.likely_refused() {
            return;
        }
        if self.evicting() {
            // A full table has no empty way: no move, and no header to read.
            if self.len < self.capacity() {
                self.other_heads_of(p, prefetch);
            }
        } else if let Some((w, to, to_w)) = self.movable(p) {
            prefetch(self.record_line(p, w));
            prefetch(self.record_line(to, to_w));
            // Below 2^27 buckets and sixteen ways: the casts do not truncate.
            self.planned[(hash as usize) % PLANNED_MOVES] = PlannedMove {
                hash,
                to: to as u32,
                sig: self.heads[p].sig[w],
                way: w as u8,
                to_way: to_w as u8,
            };
        } else if self.guard.is_none() {
            prefetch(self.eviction_line(p));
        }
    }
}
