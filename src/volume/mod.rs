//! Volumes and claims: the registry of volumes, their claims, and the
//! protocol that stages, publishes and releases them.

pub mod calls;
pub mod chores;
pub mod controller;
pub mod layout;
pub mod manager;
pub mod model;
pub mod ops;
pub mod plan;
pub mod steps;
pub mod target;
