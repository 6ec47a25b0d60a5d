//! `spillwayctl`, the operator CLI: a thin client of the daemon's admin API, in a crate of its
//! own so that the daemon links none of it (the terminal libraries of `spillwayctl top` above
//! all). The binary (`src/main.rs`) parses the arguments, calls the API through
//! `spillway_api::client` and prints what [`render`] makes of the replies (the bodies of
//! `spillway_api::types`, the ones the server fills); [`top`] is the live view's rates and
//! drawing. Keeping the text in this library lets unit tests assert what an operator sees
//! without a daemon or a process. `spillwayctl simulate` runs `spillway_control::simulate`
//! offline. `docs/operations.md` is the reference of every command.

#![forbid(unsafe_code)]

pub mod render;
mod text;
pub mod top;
