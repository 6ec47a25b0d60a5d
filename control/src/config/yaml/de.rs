//! serde's `Deserializer` over the tree. It reads YAML the way serde_yaml 0.9 did, and every
//! error it returns carries the position of the node it is about.
//!
//! - A plain scalar read by `deserialize_any` (untagged enums, custom visitors) is null (empty,
//!   `~`, `null`), a boolean (`true`, `False`...), an integer (decimal without leading zeros,
//!   `0x`, `0o`, `0b`, with a sign), a float (`1.5`, `1e3`, `.inf`, `.nan`), or else a string.
//!   Quoted and block scalars are strings; a core tag (`!!str 5`) decides.
//! - A typed read (`u16`, `f64`, `bool`) takes a plain scalar of that kind only; a string read
//!   takes any scalar as written (`80` is `"80"`).
//! - `Option`: null is `None`. An empty value is also an empty list, mapping or struct.
//! - Enums: a scalar names a unit variant (`PER_SESSION`); a tag names any variant
//!   (`!Variant value`).
//! - Aliases read their anchored node. Their expansion is bounded (100 times the size of the
//!   text), and so is nesting through them ([`MAX_DEPTH`]).
//! - A [`Choice`](crate::config::choice) is read as a string is; a name that is none of its
//!   values is, when refusals are collected, noted with the field path of the node (as
//!   [`Locations`](crate::config::locate::Locations) names it) and read as the first value.

use std::cell::RefCell;
use std::fmt;
use std::num::ParseIntError;
use std::slice;

use serde::de::{self, DeserializeSeed, Expected, Unexpected, Visitor};

use super::tree::{Document, Kind, Node, Tag, MAX_DEPTH};
use super::Refusal;
use crate::config::choice::{self, not_one_of};
use crate::config::locate::Position;

/// A deserialisation error: serde's message and, once known, where.
#[derive(Debug)]
pub(super) struct Error {
    pub(super) message: String,
    pub(super) at: Option<Position>,
}

impl Error {
    /// Sets the position unless a node nearer the problem already did.
    fn at(mut self, at: Position) -> Error {
        self.at.get_or_insert(at);
        self
    }
}

impl de::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Error {
        Error { message: message.to_string(), at: None }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

type Result<T> = std::result::Result<T, Error>;

/// Deserialises one node.
#[derive(Clone, Copy)]
pub(super) struct De<'de, 'p> {
    doc: &'de Document,
    node: &'de Node,
    /// The tag already read as an enum variant: the node's tag is not read again.
    variant: Option<&'de str>,
    /// How many more levels of nesting may be entered.
    depth: usize,
    /// The node's field path.
    path: &'p Path<'p>,
    /// Where refused names of a choice go; `None`: a refused name is an error.
    refusals: Option<&'de RefCell<Vec<Refusal>>>,
}

/// The field path of the node being read, made into text only for a refusal.
#[derive(Clone, Copy)]
pub(super) enum Path<'p> {
    /// The document.
    Root,
    /// The value of a scalar key of a mapping.
    Key(&'p Path<'p>, &'p str),
    /// An item of a sequence.
    Index(&'p Path<'p>, usize),
    /// The value of a key that is not a scalar: no path names it.
    Unnamed,
}

impl Path<'_> {
    /// `services[0].backend_service.session_affinity`, as [`super::tree`] records paths; the
    /// root's is empty.
    fn text(&self) -> Option<String> {
        match *self {
            Path::Root => Some(String::new()),
            Path::Key(parent, key) => {
                parent.text().map(
                    |p| {
                        if p.is_empty() {
                            key.to_owned()
                        } else {
                            format!("{p}.{key}")
                        }
                    },
                )
            }
            Path::Index(parent, i) => parent.text().map(|p| format!("{p}[{i}]")),
            Path::Unnamed => None,
        }
    }
}

/// A node behind any alias, by kind.
#[derive(Clone, Copy)]
enum Shape<'de> {
    Scalar(&'de str, bool),
    Seq(&'de [Node]),
    Map(&'de [(Node, Node)]),
}

impl<'de> De<'de, 'static> {
    /// Reads `doc`; a refused name of a choice goes to `refusals` when given, else it is an
    /// error.
    pub(super) fn new(
        doc: &'de Document,
        refusals: Option<&'de RefCell<Vec<Refusal>>>,
    ) -> De<'de, 'static> {
        De { doc, node: &doc.root, variant: None, depth: MAX_DEPTH, path: &Path::Root, refusals }
    }
}

impl<'de, 'p> De<'de, 'p> {
    fn child<'q>(self, node: &'de Node, path: &'q Path<'q>) -> De<'de, 'q>
    where
        'p: 'q,
    {
        De { doc: self.doc, node, variant: None, depth: self.depth, path, refusals: self.refusals }
    }

    /// The text of a scalar key, through an alias too.
    fn key_text(&self, key: &'de Node) -> Option<&'de str> {
        let node = match key.kind {
            Kind::Alias(id) => self.doc.anchors.get(&id)?,
            _ => key,
        };
        match &node.kind {
            Kind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// Follows aliases to a scalar, sequence or mapping.
    fn resolve(mut self) -> Result<(De<'de, 'p>, Shape<'de>)> {
        loop {
            let id = match &self.node.kind {
                Kind::Scalar { value, plain } => return Ok((self, Shape::Scalar(value, *plain))),
                Kind::Seq(items) => return Ok((self, Shape::Seq(items))),
                Kind::Map(entries) => return Ok((self, Shape::Map(entries))),
                Kind::Alias(id) => id,
            };
            let jumps = self.doc.jumps.get() + 1;
            if jumps > self.doc.size.saturating_mul(100) {
                return Err(de::Error::custom(
                    "aliases expand to more than 100 times the size of the text",
                ));
            }
            self.doc.jumps.set(jumps);
            let Some(node) = self.doc.anchors.get(id) else {
                return Err(de::Error::custom("an alias to an unknown anchor"));
            };
            self = De { node, variant: None, ..self };
        }
    }

    /// Runs `f` on the node behind any alias; an error without a position gets the position
    /// of this node (the alias, for an alias).
    fn with<T>(self, f: impl FnOnce(De<'de, 'p>, Shape<'de>) -> Result<T>) -> Result<T> {
        let at = self.node.at;
        self.resolve().and_then(|(de, shape)| f(de, shape)).map_err(|e| e.at(at))
    }

    /// The node's tag, unless it was read as an enum variant already.
    fn tag(&self) -> Option<&'de Tag> {
        self.node.tag.as_ref().filter(|_| self.variant.is_none())
    }

    fn core_tag(&self) -> Option<&'de str> {
        match self.tag() {
            Some(Tag::Core(t)) => Some(t),
            _ => None,
        }
    }

    /// The text of a scalar that a typed read of the core type `tag` accepts: a plain one,
    /// or one with that tag (`!!int "5"`).
    fn typed(&self, shape: Shape<'de>, tag: &str) -> Option<&'de str> {
        match shape {
            Shape::Scalar(v, plain) if plain || self.core_tag() == Some(tag) => Some(v),
            _ => None,
        }
    }

    fn nested(self) -> Result<De<'de, 'p>> {
        match self.depth.checked_sub(1) {
            Some(depth) => Ok(De { depth, ..self }),
            None => Err(de::Error::custom(format!("nested deeper than {MAX_DEPTH} levels"))),
        }
    }

    fn visit_seq<V: Visitor<'de>>(self, items: &'de [Node], visitor: V) -> Result<V::Value> {
        let mut seq = SeqReader { de: self.nested()?, items: items.iter(), read: 0 };
        let value = visitor.visit_seq(&mut seq)?;
        match seq.items.len() {
            0 => Ok(value),
            left => {
                Err(de::Error::invalid_length(seq.read + left, &Len { read: seq.read, map: false }))
            }
        }
    }

    fn visit_map<V: Visitor<'de>>(
        self,
        entries: &'de [(Node, Node)],
        visitor: V,
    ) -> Result<V::Value> {
        let mut map =
            MapReader { de: self.nested()?, entries: entries.iter(), entry: None, read: 0 };
        let value = visitor.visit_map(&mut map)?;
        match map.entries.len() {
            0 => Ok(value),
            left => {
                Err(de::Error::invalid_length(map.read + left, &Len { read: map.read, map: true }))
            }
        }
    }
}

impl<'de> De<'de, '_> {
    /// A value of a [`Choice`](choice::Choice) named `names`: any scalar, as written (as a
    /// string is read). A name that is none of `names` is refused: noted with the node's path,
    /// and the first name read in its place, when refusals are collected; else (or where no
    /// path names the node) passed on for the visitor to refuse.
    fn choice<V: Visitor<'de>>(
        self,
        names: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        self.with(|de, shape| match shape {
            Shape::Scalar(v, _) if !names.contains(&v) => {
                match (de.refusals, de.path.text(), names.first()) {
                    (Some(refusals), Some(field), Some(first)) => {
                        let message = not_one_of(v, names);
                        refusals.borrow_mut().push(Refusal { field, message });
                        visitor.visit_borrowed_str(first)
                    }
                    _ => visitor.visit_borrowed_str(v),
                }
            }
            Shape::Scalar(v, _) => visitor.visit_borrowed_str(v),
            _ => Err(invalid_type(shape, &visitor)),
        })
    }
}

/// "sequence of 2 elements", "map containing 1 entry": what the visitor read.
struct Len {
    read: usize,
    map: bool,
}

impl Expected for Len {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.map, self.read) {
            (false, 1) => f.write_str("sequence of 1 element"),
            (false, n) => write!(f, "sequence of {n} elements"),
            (true, 1) => f.write_str("map containing 1 entry"),
            (true, n) => write!(f, "map containing {n} entries"),
        }
    }
}

fn is_null_word(v: &str) -> bool {
    matches!(v, "~" | "null" | "Null" | "NULL")
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// `0123`: a string in YAML 1.2, not a number.
fn leading_zero(v: &str) -> bool {
    let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
    digits.len() > 1 && digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit())
}

/// An integer: an optional sign, then decimal digits without a leading zero, or `0x`, `0o`,
/// `0b` and digits of that base.
fn parse_int<T>(
    v: &str,
    from_str_radix: fn(&str, u32) -> std::result::Result<T, ParseIntError>,
) -> Option<T> {
    let (negative, unsigned) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    let (radix, digits) = [("0x", 16), ("0o", 8), ("0b", 2)]
        .into_iter()
        .find_map(|(prefix, radix)| unsigned.strip_prefix(prefix).map(|d| (radix, d)))
        .unwrap_or((10, unsigned));
    if digits.starts_with(['+', '-']) || (radix == 10 && leading_zero(digits)) {
        return None;
    }
    if negative {
        from_str_radix(&format!("-{digits}"), radix).ok()
    } else {
        from_str_radix(digits, radix).ok()
    }
}

fn parse_f64(v: &str) -> Option<f64> {
    let unsigned = match v.strip_prefix('+') {
        Some(rest) if rest.starts_with(['+', '-']) => return None,
        Some(rest) => rest,
        None => v,
    };
    match (v, unsigned) {
        (_, ".inf" | ".Inf" | ".INF") => Some(f64::INFINITY),
        ("-.inf" | "-.Inf" | "-.INF", _) => Some(f64::NEG_INFINITY),
        (".nan" | ".NaN" | ".NAN", _) => Some(f64::NAN),
        _ => unsigned.parse::<f64>().ok().filter(|f| f.is_finite()),
    }
}

/// Visits an integer as the first of u64, i64, u128, i128 that holds it; gives the visitor
/// back when `v` is no integer.
fn visit_int<'de, V: Visitor<'de>>(
    visitor: V,
    v: &str,
) -> std::result::Result<Result<V::Value>, V> {
    if let Some(n) = parse_int(v, u64::from_str_radix) {
        Ok(visitor.visit_u64(n))
    } else if let Some(n) = parse_int(v, i64::from_str_radix) {
        Ok(visitor.visit_i64(n))
    } else if let Some(n) = parse_int(v, u128::from_str_radix) {
        Ok(visitor.visit_u128(n))
    } else if let Some(n) = parse_int(v, i128::from_str_radix) {
        Ok(visitor.visit_i128(n))
    } else {
        Err(visitor)
    }
}

/// A scalar as `deserialize_any` reads it: by its core tag if it has one, else a plain
/// scalar by the YAML 1.2 core schema and any other scalar as a string.
fn visit_scalar<'de, V: Visitor<'de>>(
    visitor: V,
    v: &'de str,
    plain: bool,
    core_tag: Option<&str>,
) -> Result<V::Value> {
    let invalid = |what: &str| de::Error::invalid_value(Unexpected::Str(v), &what);
    match core_tag {
        Some("bool") => {
            parse_bool(v).map_or_else(|| Err(invalid("a boolean")), |b| visitor.visit_bool(b))
        }
        Some("int") => visit_int(visitor, v).unwrap_or_else(|_| Err(invalid("an integer"))),
        Some("float") => {
            parse_f64(v).map_or_else(|| Err(invalid("a float")), |f| visitor.visit_f64(f))
        }
        Some("null") if is_null_word(v) => visitor.visit_unit(),
        Some("null") => Err(invalid("null")),
        Some(_) => visitor.visit_borrowed_str(v),
        None if !plain => visitor.visit_borrowed_str(v),
        None if v.is_empty() || is_null_word(v) => visitor.visit_unit(),
        None => {
            if let Some(b) = parse_bool(v) {
                return visitor.visit_bool(b);
            }
            let visitor = match visit_int(visitor, v) {
                Ok(result) => return result,
                Err(visitor) => visitor,
            };
            match parse_f64(v).filter(|_| !leading_zero(v)) {
                Some(f) => visitor.visit_f64(f),
                None => visitor.visit_borrowed_str(v),
            }
        }
    }
}

/// serde's "invalid type: string "lots", expected u16": the scalar is named by what it reads
/// as.
fn invalid_type(shape: Shape<'_>, expected: &dyn Expected) -> Error {
    enum Never {}
    struct What<'a>(&'a dyn Expected);
    impl Visitor<'_> for What<'_> {
        type Value = Never;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.fmt(f)
        }
    }
    match shape {
        Shape::Scalar(v, plain) => match visit_scalar(What(expected), v, plain, None) {
            Ok(never) => match never {},
            Err(e) => e,
        },
        Shape::Seq(_) => de::Error::invalid_type(Unexpected::Seq, expected),
        Shape::Map(_) => de::Error::invalid_type(Unexpected::Map, expected),
    }
}

/// The typed reads of numbers and booleans.
macro_rules! typed {
    ($($method:ident: $tag:literal, $parse:expr, $visit:ident;)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            self.with(|de, shape| match de.typed(shape, $tag).and_then($parse) {
                Some(v) => visitor.$visit(v),
                None => Err(invalid_type(shape, &visitor)),
            })
        }
    )*};
}

/// Methods that read like another one.
macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*) => $to:ident($($pass:expr),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value> {
            $(let _ = $arg;)*
            self.$to($($pass,)* visitor)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for De<'de, '_> {
    type Error = Error;

    typed! {
        deserialize_bool: "bool", parse_bool, visit_bool;
        deserialize_i64: "int", |v| parse_int(v, i64::from_str_radix), visit_i64;
        deserialize_i128: "int", |v| parse_int(v, i128::from_str_radix), visit_i128;
        deserialize_u64: "int", |v| parse_int(v, u64::from_str_radix), visit_u64;
        deserialize_u128: "int", |v| parse_int(v, u128::from_str_radix), visit_u128;
        deserialize_f64: "float", parse_f64, visit_f64;
    }

    forward! {
        deserialize_i8() => deserialize_i64();
        deserialize_i16() => deserialize_i64();
        deserialize_i32() => deserialize_i64();
        deserialize_u8() => deserialize_u64();
        deserialize_u16() => deserialize_u64();
        deserialize_u32() => deserialize_u64();
        deserialize_f32() => deserialize_f64();
        deserialize_char() => deserialize_str();
        deserialize_string() => deserialize_str();
        deserialize_identifier() => deserialize_str();
        deserialize_unit_struct(name: &'static str) => deserialize_unit();
        deserialize_tuple(len: usize) => deserialize_seq();
        deserialize_tuple_struct(name: &'static str, len: usize) => deserialize_seq();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]) => deserialize_map();
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.with(|de, shape| {
            if let Some(Tag::Local(tag)) = de.tag() {
                return visitor.visit_enum(Tagged { de, tag });
            }
            match shape {
                Shape::Scalar(v, plain) => visit_scalar(visitor, v, plain, de.core_tag()),
                Shape::Seq(items) => de.visit_seq(items, visitor),
                Shape::Map(entries) => de.visit_map(entries, visitor),
            }
        })
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.with(|_, shape| match shape {
            Shape::Scalar(v, _) => visitor.visit_borrowed_str(v),
            _ => Err(invalid_type(shape, &visitor)),
        })
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value> {
        Err(<Error as de::Error>::custom("bytes cannot be read from YAML").at(self.node.at))
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.with(|de, shape| {
            let some = match (shape, de.tag()) {
                (Shape::Scalar(v, true), Some(Tag::Core(t))) if t == "null" => {
                    if !is_null_word(v) {
                        return Err(de::Error::invalid_value(Unexpected::Str(v), &"null"));
                    }
                    false
                }
                (Shape::Scalar(_, true), Some(_)) => true,
                (Shape::Scalar(v, true), None) => !(v.is_empty() || is_null_word(v)),
                _ => true,
            };
            if some {
                // Unresolved, so that an error names the alias rather than its anchor.
                visitor.visit_some(self)
            } else {
                visitor.visit_none()
            }
        })
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.with(|de, shape| match shape {
            Shape::Scalar(v, plain) => {
                let null = plain
                    && match de.tag() {
                        Some(Tag::Core(t)) => t == "null" && is_null_word(v),
                        Some(Tag::Local(_)) => false,
                        None => v.is_empty() || is_null_word(v),
                    };
                if null {
                    visitor.visit_unit()
                } else {
                    Err(de::Error::invalid_value(Unexpected::Str(v), &"null"))
                }
            }
            _ => Err(invalid_type(shape, &visitor)),
        })
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        let at = self.node.at;
        visitor.visit_newtype_struct(self).map_err(|e| e.at(at))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.with(|de, shape| match shape {
            Shape::Seq(items) => de.visit_seq(items, visitor),
            Shape::Scalar("", true) => de.visit_seq(&[], visitor),
            _ => Err(invalid_type(shape, &visitor)),
        })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.with(|de, shape| match shape {
            Shape::Map(entries) => de.visit_map(entries, visitor),
            Shape::Scalar("", true) => de.visit_map(&[], visitor),
            _ => Err(invalid_type(shape, &visitor)),
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        if name == choice::TOKEN {
            return self.choice(variants, visitor);
        }
        self.with(|de, shape| {
            if let Some(outer) = de.variant {
                return match shape {
                    Shape::Scalar(v, _) if !v.is_empty() => visitor.visit_enum(Unit(de)),
                    _ => Err(de::Error::custom(format!(
                        "enum {name} inside !{outer}: a nested enum takes its variant by name"
                    ))),
                };
            }
            if let Some(Tag::Local(tag)) = de.tag() {
                return visitor.visit_enum(Tagged { de, tag });
            }
            match shape {
                Shape::Scalar(..) => visitor.visit_enum(Unit(de)),
                Shape::Seq(_) => Err(de::Error::invalid_type(Unexpected::Seq, &TAG)),
                Shape::Map(_) => Err(de::Error::invalid_type(Unexpected::Map, &TAG)),
            }
        })
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_unit()
    }
}

const TAG: &str = "a variant name, or a YAML tag `!Variant` before the value";

struct SeqReader<'de, 'p> {
    de: De<'de, 'p>,
    items: slice::Iter<'de, Node>,
    read: usize,
}

impl<'de> de::SeqAccess<'de> for SeqReader<'de, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        let Some(node) = self.items.next() else { return Ok(None) };
        let path = Path::Index(self.de.path, self.read);
        self.read += 1;
        // The position of the item for errors found after its deserializer returned
        // (`try_from`, untagged enums).
        seed.deserialize(self.de.child(node, &path)).map(Some).map_err(|e| e.at(node.at))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapReader<'de, 'p> {
    de: De<'de, 'p>,
    entries: slice::Iter<'de, (Node, Node)>,
    /// The entry whose key was just read.
    entry: Option<&'de (Node, Node)>,
    read: usize,
}

impl<'de> de::MapAccess<'de> for MapReader<'de, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        let Some(entry) = self.entries.next() else { return Ok(None) };
        self.read += 1;
        self.entry = Some(entry);
        let key = &entry.0;
        // A key is no field: it has no path of its own.
        seed.deserialize(self.de.child(key, &Path::Unnamed)).map(Some).map_err(|e| e.at(key.at))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value> {
        let Some((key, node)) = self.entry.take() else {
            return Err(de::Error::custom("a map value was read before its key"));
        };
        let path = match self.de.key_text(key) {
            Some(k) => Path::Key(self.de.path, k),
            None => Path::Unnamed,
        };
        seed.deserialize(self.de.child(node, &path)).map_err(|e| e.at(node.at))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An enum variant named by a tag: `!Variant value`.
struct Tagged<'de, 'p> {
    de: De<'de, 'p>,
    tag: &'de str,
}

impl<'de, 'p> de::EnumAccess<'de> for Tagged<'de, 'p> {
    type Error = Error;
    type Variant = De<'de, 'p>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, De<'de, 'p>)> {
        let name = de::value::BorrowedStrDeserializer::<Error>::new(self.tag);
        let variant = seed.deserialize(name).map_err(|e| e.at(self.de.node.at))?;
        Ok((variant, De { variant: Some(self.tag), ..self.de }))
    }
}

impl<'de> de::VariantAccess<'de> for De<'de, '_> {
    type Error = Error;

    fn unit_variant(self) -> Result<()> {
        de::Deserialize::deserialize(self)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        de::Deserializer::deserialize_map(self, visitor)
    }
}

/// A unit variant named by a scalar: `PER_SESSION`.
struct Unit<'de, 'p>(De<'de, 'p>);

impl<'de, 'p> de::EnumAccess<'de> for Unit<'de, 'p> {
    type Error = Error;
    type Variant = Unit<'de, 'p>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Unit<'de, 'p>)> {
        Ok((seed.deserialize(self.0)?, self))
    }
}

impl<'de> de::VariantAccess<'de> for Unit<'de, '_> {
    type Error = Error;

    fn unit_variant(self) -> Result<()> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _seed: T) -> Result<T::Value> {
        Err(de::Error::invalid_type(Unexpected::UnitVariant, &"newtype variant"))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, _visitor: V) -> Result<V::Value> {
        Err(de::Error::invalid_type(Unexpected::UnitVariant, &"tuple variant"))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value> {
        Err(de::Error::invalid_type(Unexpected::UnitVariant, &"struct variant"))
    }
}
