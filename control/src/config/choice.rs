//! Settings with a fixed set of values, each written in the file as one exact, case-sensitive
//! name (`PER_SESSION`, `preferred`): the [`Choice`] types.
//!
//! A field of such a type is read by serde from its name, once: the configuration holds the
//! enum, never the string, and nothing parses it again. A name that is none of the values is
//! refused with the names that are: "`PER_FLOW` is not one of `PER_CONNECTION`,
//! `PER_SESSION`".
//!
//! When the loader reads a file ([`super::yaml::from_str_with_refusals`]), a refused name does
//! not stop the reading: the reader notes it (field path and message) and reads on with the
//! type's first value standing in, so that the loader reports it together with every other
//! problem of the file. The stand-in is never used: validation skips the checks of a refused
//! field ([`Refused`]), and a file with a refusal is never applied. Any other reader
//! ([`super::yaml::from_str`], serde_json) stops at a refused name as at any serde error, with
//! the same message.
//!
//! The YAML reader and these types meet through serde's `deserialize_enum`, under a name of
//! their own ([`TOKEN`], as serde_json's `RawValue` meets its reader): the reader then reads
//! the value exactly as it reads a string (any scalar, as written), and checks it against the
//! names serde passes along with the token.
//!
//! Where the decision core has the enum already ([`Affinity`], [`TrackingMode`],
//! [`Persistence`], [`Algorithm`], [`RuleProtocol`]), the configuration holds the core's type
//! (read with [`deserialize`] / [`deserialize_option`], as the core has no serde); the others
//! are declared with `choice!`.

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, EnumAccess, VariantAccess, Visitor};
use spillway_core::model::{Algorithm, RuleProtocol};
use spillway_core::policy::{Affinity, Persistence, TrackingMode};

/// A setting with a fixed set of values, each with its name in the file.
pub trait Choice: Copy + PartialEq + 'static {
    /// Every value, in the order the names are listed.
    const ALL: &'static [Self];
    /// The name of each value of [`Choice::ALL`], in the same order.
    const NAMES: &'static [&'static str];

    /// This value's name in the file.
    fn name(self) -> &'static str;

    /// The value named `name`, exactly.
    fn from_name(name: &str) -> Option<Self> {
        Self::NAMES.iter().position(|n| *n == name).map(|i| Self::ALL[i])
    }
}

/// "`X` is not one of `A`, `B`, `C`": the message of a refused name (and of other closed
/// lists of the configuration).
pub(crate) fn not_one_of(value: &str, allowed: &[&str]) -> String {
    let list: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
    format!("`{value}` is not one of {}", list.join(", "))
}

/// The fields whose name the reader refused: they hold a stand-in, which no check may read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Refused(HashSet<String>);

impl Refused {
    /// The refused fields, by path.
    pub(crate) fn new(fields: impl IntoIterator<Item = String>) -> Refused {
        Refused(fields.into_iter().collect())
    }

    /// `value`, read from `field`, unless the reader refused what the file says there.
    pub(crate) fn known<T>(&self, field: &str, value: T) -> Option<T> {
        (!self.0.contains(field)).then_some(value)
    }
}

/// The enum name a [`Choice`] passes to `deserialize_enum`, by which the YAML reader knows it.
pub(crate) const TOKEN: &str = "$spillway::config::Choice";

/// Reads a [`Choice`] by its name: `#[serde(deserialize_with = "choice::deserialize")]` for a
/// type of another crate.
pub fn deserialize<'de, D: Deserializer<'de>, T: Choice>(d: D) -> Result<T, D::Error> {
    d.deserialize_enum(TOKEN, T::NAMES, Named(PhantomData))
}

/// [`deserialize`] for an optional field: null (or nothing) is `None`.
pub fn deserialize_option<'de, D: Deserializer<'de>, T: Choice>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Ok(Option::<Read<T>>::deserialize(d)?.map(|r| r.0))
}

/// A [`Choice`] read by [`deserialize`].
struct Read<T>(T);

impl<'de, T: Choice> Deserialize<'de> for Read<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize(d).map(Read)
    }
}

struct Named<T>(PhantomData<T>);

impl<'de, T: Choice> Visitor<'de> for Named<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // What a wrong type is reported against, as when these fields were strings.
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        T::from_name(v).ok_or_else(|| E::custom(not_one_of(v, T::NAMES)))
    }

    /// A reader that names enum variants itself (serde_json's `"NONE"`).
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<T, A::Error> {
        let (name, variant): (String, _) = data.variant()?;
        variant.unit_variant()?;
        self.visit_str(&name)
    }
}

/// Declares an enum whose values are named in the file: the enum, [`Choice`], `Display` (the
/// name) and `Deserialize` (by [`deserialize`]). Give `#[derive(Default)]` and `#[default]`
/// where the field has a default.
macro_rules! choice {
    (
        $(#[$meta:meta])*
        pub enum $ty:ident {
            $($(#[$vmeta:meta])* $variant:ident => $name:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $ty {
            $($(#[$vmeta])* $variant,)+
        }

        impl $crate::config::choice::Choice for $ty {
            const ALL: &'static [$ty] = &[$($ty::$variant),+];
            const NAMES: &'static [&'static str] = &[$($name),+];

            fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($crate::config::choice::Choice::name(*self))
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::config::choice::deserialize(d)
            }
        }
    };
}
pub(crate) use choice;

/// The core's enums, by their API names.
macro_rules! core_choices {
    ($($ty:ty),+) => {$(
        impl Choice for $ty {
            const ALL: &'static [$ty] = <$ty>::ALL;
            const NAMES: &'static [&'static str] = <$ty>::NAMES;

            fn name(self) -> &'static str {
                self.as_str()
            }
        }
    )+};
}

core_choices!(Affinity, TrackingMode, Persistence, Algorithm, RuleProtocol);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{
        AnnounceMode, EncapsulationType, HealthCheckType, HugepagePolicy, InitialVerdict,
        KernelDriver, Spillover,
    };

    fn names_match<T: Choice + fmt::Debug>() {
        assert_eq!(T::ALL.len(), T::NAMES.len());
        for (v, n) in T::ALL.iter().zip(T::NAMES) {
            assert_eq!(v.name(), *n, "{v:?}");
            assert_eq!(T::from_name(n), Some(*v));
        }
        // Exactly: another case is another name.
        let n = T::NAMES[0];
        let other = if n == n.to_uppercase() { n.to_lowercase() } else { n.to_uppercase() };
        assert_eq!(T::from_name(&other), None, "{other}");
    }

    #[test]
    fn every_value_has_its_own_name_and_only_that() {
        names_match::<Affinity>();
        names_match::<TrackingMode>();
        names_match::<Persistence>();
        names_match::<Algorithm>();
        names_match::<RuleProtocol>();
        names_match::<HugepagePolicy>();
        names_match::<KernelDriver>();
        names_match::<AnnounceMode>();
        names_match::<HealthCheckType>();
        names_match::<InitialVerdict>();
        names_match::<EncapsulationType>();
        names_match::<Spillover>();
    }

    #[test]
    fn other_readers_refuse_an_unknown_name_with_the_list() {
        let read = |text: &str| -> Result<Persistence, serde_json::Error> {
            deserialize(&mut serde_json::Deserializer::from_str(text))
        };
        assert_eq!(read("\"NEVER_PERSIST\"").unwrap(), Persistence::NeverPersist);
        let e = read("\"SOMETIMES\"").unwrap_err();
        let refused = "`SOMETIMES` is not one of `DEFAULT_FOR_PROTOCOL`, `NEVER_PERSIST`, \
                       `ALWAYS_PERSIST`";
        assert!(e.to_string().starts_with(refused), "{e}");
        // A type declared with `choice!` reads itself.
        assert_eq!(serde_json::from_str::<HugepagePolicy>("\"off\"").unwrap(), HugepagePolicy::Off);
        let e = serde_json::from_str::<HugepagePolicy>("\"maybe\"").unwrap_err();
        assert!(
            e.to_string().starts_with("`maybe` is not one of `required`, `preferred`, `off`"),
            "{e}"
        );
        assert_eq!(HugepagePolicy::Preferred.to_string(), "preferred");
        assert_eq!(not_one_of("x", &["a", "b"]), "`x` is not one of `a`, `b`");
    }
}
