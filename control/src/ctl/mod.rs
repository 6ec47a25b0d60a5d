//! `spillwayctl`'s library side: what it prints for people. The binary
//! (`src/bin/spillwayctl.rs`) parses the arguments, calls the admin API through
//! [`crate::api::client`] and prints what [`render`] makes of the replies; keeping the text
//! here lets unit tests assert what an operator sees without a daemon or a process; [`top`]
//! is the live view's rates and drawing.

pub mod render;
mod text;
pub mod top;
