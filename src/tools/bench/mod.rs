//! `ferroce bench`: measurements taken beside their baselines in the same
//! run ([`e2e`]: the transport end to end between two engines).

pub mod e2e;
