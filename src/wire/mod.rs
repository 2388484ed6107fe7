//! RoCE v2 byte layouts. So far: the ICRC ([`icrc`]); the header views and
//! whole-frame parse / emit follow.

#![deny(unsafe_code)]

pub mod icrc;
