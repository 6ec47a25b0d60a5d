//! The one pass over the text: saphyr-parser's events become a tree of nodes that keep their
//! position, and the [`Locations`] of every field path are recorded on the way (by the rules
//! of [`crate::config::locate`]).

use std::cell::Cell;
use std::collections::HashMap;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, Tag as ParserTag};

use crate::config::locate::{Locations, Position};

/// Deepest nesting of mappings and sequences, as in serde_yaml. Deeper input is refused: the
/// tree is read and dropped recursively.
pub(super) const MAX_DEPTH: usize = 128;

/// A parsed document.
pub(super) struct Document {
    pub(super) root: Node,
    /// Every anchored node by the parser's anchor id; the tree holds a [`Kind::Alias`] where
    /// it was defined and where it is used.
    pub(super) anchors: HashMap<usize, Node>,
    /// Nodes in the text, which bounds how many alias expansions deserialising may make.
    pub(super) size: usize,
    /// Alias expansions made so far.
    pub(super) jumps: Cell<usize>,
}

/// One node.
pub(super) struct Node {
    /// Where errors about the node point, and what [`Locations`] records for its path: a
    /// scalar or an alias at itself, a mapping or sequence that is a mapping value at its key,
    /// anything else where it starts.
    pub(super) at: Position,
    pub(super) tag: Option<Tag>,
    pub(super) kind: Kind,
}

pub(super) enum Kind {
    /// The text of a scalar; `plain` when unquoted (without a core tag, only plain scalars
    /// read as null, booleans or numbers).
    Scalar {
        value: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
    /// The anchored node of this id, in [`Document::anchors`].
    Alias(usize),
}

/// The tags serde reads; any other tag is ignored.
pub(super) enum Tag {
    /// `!!str`, `!!int`, `!!float`, `!!bool`, `!!null`...: the part after `!!`.
    Core(String),
    /// `!Name`: names the variant of an enum.
    Local(String),
}

/// Invalid YAML: the parser's message and where it stopped.
pub(super) struct SyntaxError {
    pub(super) at: Position,
    pub(super) message: String,
}

/// Reads `text` (one document). The locations are returned even on a syntax error: they hold
/// what was read before it.
pub(super) fn parse(text: &str) -> (Result<Document, SyntaxError>, Locations) {
    let mut b = Builder::default();
    let read = b.read(text);
    let doc = read.map(|()| Document {
        root: b.root.unwrap_or(Node {
            at: (1, 1),
            tag: None,
            kind: Kind::Scalar { value: String::new(), plain: true },
        }),
        anchors: b.anchors,
        size: b.size,
        jumps: Cell::new(0),
    });
    (doc, b.locations)
}

fn pos(m: Marker) -> Position {
    (m.line(), m.col() + 1)
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

fn tag(t: Option<&ParserTag>) -> Option<Tag> {
    let t = t?;
    if t.is_yaml_core_schema() {
        Some(Tag::Core(t.suffix.clone()))
    } else if t.handle == "!" && !t.suffix.is_empty() {
        Some(Tag::Local(t.suffix.clone()))
    } else {
        None
    }
}

/// A mapping or sequence being read.
struct Open {
    at: Position,
    tag: Option<Tag>,
    anchor: usize,
    /// Its field path; `None` inside a key that is not a scalar (no path names it).
    path: Option<String>,
    body: Body,
}

enum Body {
    Seq(Vec<Node>),
    /// `key` is the key read and waiting for its value.
    Map {
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
    },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
    size: usize,
    locations: Locations,
}

impl Builder {
    fn read(&mut self, text: &str) -> Result<(), SyntaxError> {
        let mut documents = 0;
        for item in Parser::new_from_str(text) {
            let (event, span) = item
                .map_err(|e| SyntaxError { at: pos(*e.marker()), message: e.info().to_owned() })?;
            let here = pos(span.start);
            match event {
                Event::DocumentStart(_) => {
                    documents += 1;
                    if documents > 1 {
                        return Err(SyntaxError {
                            at: here,
                            message: "a second YAML document: only one is read".into(),
                        });
                    }
                }
                Event::Scalar(value, style, anchor, t) => {
                    self.record(self.child(here).0, here);
                    let plain = style == ScalarStyle::Plain;
                    let kind = Kind::Scalar { value: value.into_owned(), plain };
                    self.finish(Node { at: here, tag: tag(t.as_deref()), kind }, anchor);
                }
                Event::Alias(id) => {
                    // The parser knows the anchor; it is missing here only while its own node
                    // is still open.
                    if !self.anchors.contains_key(&id) {
                        return Err(SyntaxError {
                            at: here,
                            message: "an alias inside the node of its own anchor".into(),
                        });
                    }
                    self.record(self.child(here).0, here);
                    self.finish(Node { at: here, tag: None, kind: Kind::Alias(id) }, 0);
                }
                Event::SequenceStart(anchor, ref t) | Event::MappingStart(anchor, ref t) => {
                    if self.stack.len() >= MAX_DEPTH {
                        return Err(SyntaxError {
                            at: here,
                            message: format!("nested deeper than {MAX_DEPTH} levels"),
                        });
                    }
                    let (path, at) = self.child(here);
                    self.record(path.clone(), at);
                    let body = if matches!(event, Event::MappingStart(..)) {
                        Body::Map { entries: Vec::new(), key: None }
                    } else {
                        Body::Seq(Vec::new())
                    };
                    self.stack.push(Open { at, tag: tag(t.as_deref()), anchor, path, body });
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    let Some(open) = self.stack.pop() else { continue };
                    let kind = match open.body {
                        Body::Seq(items) => Kind::Seq(items),
                        Body::Map { entries, .. } => Kind::Map(entries),
                    };
                    self.finish(Node { at: open.at, tag: open.tag, kind }, open.anchor);
                }
                Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
            }
        }
        Ok(())
    }

    /// The field path of the node starting at `here` and where a block there is reported:
    /// at its key inside a mapping, at `here` elsewhere. The root's path is empty; a key has
    /// none.
    fn child(&self, here: Position) -> (Option<String>, Position) {
        let Some(open) = self.stack.last() else { return (Some(String::new()), here) };
        match &open.body {
            Body::Map { key: None, .. } => (None, here),
            Body::Map { key: Some(k), .. } => {
                let path = open.path.as_deref().zip(self.key_text(k)).map(|(p, k)| join(p, k));
                (path, k.at)
            }
            Body::Seq(items) => (open.path.as_ref().map(|p| format!("{p}[{}]", items.len())), here),
        }
    }

    /// The text of a scalar key, through an alias too.
    fn key_text<'a>(&'a self, key: &'a Node) -> Option<&'a str> {
        let node = match key.kind {
            Kind::Alias(id) => self.anchors.get(&id)?,
            _ => key,
        };
        match &node.kind {
            Kind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    fn record(&mut self, path: Option<String>, at: Position) {
        if let Some(path) = path.filter(|p| !p.is_empty()) {
            self.locations.insert(path, at);
        }
    }

    /// A node is complete: it goes to the anchors if it has one (leaving an alias in its
    /// place), then under its parent.
    fn finish(&mut self, mut node: Node, anchor: usize) {
        self.size += 1;
        if anchor != 0 {
            let at = node.at;
            self.anchors.insert(anchor, node);
            node = Node { at, tag: None, kind: Kind::Alias(anchor) };
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Open { body: Body::Seq(items), .. }) => items.push(node),
            Some(Open { body: Body::Map { entries, key }, .. }) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push((k, node)),
            },
        }
    }
}
