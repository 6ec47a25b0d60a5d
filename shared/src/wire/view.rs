//! What every header view has in common: big-endian field access on a byte slice, and the
//! [`view!`] macro that declares a view so that each header module states only its fields.

use super::Malformed;

/// A fixed-size field read from and written to a byte slice at an offset: `u8`, the
/// big-endian `u16` and `u32`, and byte arrays (addresses). Callers have checked the length
/// (views after `check_len`), so indexing cannot fail there.
pub(crate) trait Field: Sized {
    fn get(b: &[u8], at: usize) -> Self;
    fn set(self, b: &mut [u8], at: usize);
}

impl Field for u8 {
    #[inline]
    fn get(b: &[u8], at: usize) -> u8 {
        b[at]
    }
    #[inline]
    fn set(self, b: &mut [u8], at: usize) {
        b[at] = self;
    }
}

impl Field for u16 {
    #[inline]
    fn get(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    #[inline]
    fn set(self, b: &mut [u8], at: usize) {
        b[at..at + 2].copy_from_slice(&self.to_be_bytes());
    }
}

impl Field for u32 {
    #[inline]
    fn get(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    #[inline]
    fn set(self, b: &mut [u8], at: usize) {
        b[at..at + 4].copy_from_slice(&self.to_be_bytes());
    }
}

impl<const N: usize> Field for [u8; N] {
    #[inline]
    fn get(b: &[u8], at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&b[at..at + N]);
        out
    }
    #[inline]
    fn set(self, b: &mut [u8], at: usize) {
        b[at..at + N].copy_from_slice(&self);
    }
}

/// `Ok` when a header of at least `min` bytes fits in `len` bytes and so does the length it
/// announces (`announced`, read only then), which may not be below `min` either; else `err`.
#[inline]
pub(crate) fn check_announced(
    len: usize,
    min: usize,
    announced: impl FnOnce() -> usize,
    err: Malformed,
) -> Result<(), Malformed> {
    if len < min {
        return Err(err);
    }
    let n = announced();
    if n < min || n > len {
        return Err(err);
    }
    Ok(())
}

/// Declares a header view (the smoltcp contract of the [module doc](super)):
///
/// ```text
/// view! {
///     /// The view's doc.
///     Name;
///     check_len: MIN_LEN => MalformedVariant;   // optional: else the module writes check_len
///     fields {
///         /// The field's doc.
///         getter, setter: Type = offset;        // ", setter" is optional
///     }
/// }
/// ```
///
/// gives `pub struct Name<T: AsRef<[u8]>>` with `new_unchecked`, `new_checked`, `into_inner`,
/// the `check_len` of a view whose only check is a minimum length, and a getter (and setter)
/// per [`Field`] at a fixed offset. Everything else a view does (lengths it announces, bit
/// fields, slices) is written out in the header's module.
macro_rules! view {
    (
        $(#[$doc:meta])*
        $name:ident;
        $(check_len: $min:ident => $err:ident;)?
        fields {
            $($(#[$field_doc:meta])* $get:ident $(, $set:ident)?: $ty:ty = $at:expr;)*
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wrap a buffer without checking it.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            #[doc = concat!(
                "Wrap a buffer and check it (see [`", stringify!($name), "::check_len`])."
            )]
            pub fn new_checked(buffer: T) -> Result<Self, $crate::wire::Malformed> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            $(
                #[doc = concat!(
                    "`", stringify!($err), "` when the buffer is shorter than [`",
                    stringify!($min), "`] bytes."
                )]
                pub fn check_len(&self) -> Result<(), $crate::wire::Malformed> {
                    if self.buffer.as_ref().len() < $min {
                        Err($crate::wire::Malformed::$err)
                    } else {
                        Ok(())
                    }
                }
            )?

            $(
                $(#[$field_doc])*
                pub fn $get(&self) -> $ty {
                    <$ty as $crate::wire::view::Field>::get(self.buffer.as_ref(), $at)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            $($(
                #[doc = concat!("Set [`", stringify!($get), "`](Self::", stringify!($get), ").")]
                pub fn $set(&mut self, v: $ty) {
                    $crate::wire::view::Field::set(v, self.buffer.as_mut(), $at);
                }
            )?)*
        }
    };
}

pub(crate) use view;
