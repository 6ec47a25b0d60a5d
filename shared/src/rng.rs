//! SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA
//! 2014): a 64-bit state advanced by a Weyl increment and a finalizer that mixes it, one add
//! and two multiplies per 64 random bits.
//!
//! The one pseudo-random stream of the project: the traffic generator's choices, health-check
//! jitter, benchmark and test data. Not for anything that must be unpredictable; a given seed
//! always gives the same sequence, and tests pin bytes generated from it.

/// The Weyl increment: 2^64 / golden ratio, odd.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// A SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose state starts at `seed`.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        finalize(self.0)
    }
}

/// The first output of a generator seeded with `seed`: a well-mixed value from a counter or a
/// key, with no state to carry.
#[inline]
pub fn mix(seed: u64) -> u64 {
    finalize(seed.wrapping_add(GAMMA))
}

/// The mixing function (a variant of MurmurHash3's 64-bit finalizer).
#[inline]
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The reference outputs for seed 1234567 (the C implementation by Vigna).
    #[test]
    fn reference_sequence() {
        let mut r = SplitMix64::new(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
        assert_eq!(mix(1_234_567), got[0]);
    }
}
