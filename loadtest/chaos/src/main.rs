//! `baton-chaos`: see the crate documentation.

fn main() {}
