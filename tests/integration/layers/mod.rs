//! The crate's import graph held to its architecture (issue 27): no arrow
//! runs up the layers, no circle inside `volume/` or `csi/`, the control
//! API's wire types (`proto::agent`) stay at its edge (`api/` and `cli/`),
//! and no file has more than 700 lines of code before its tests.
//!
//! There is no graph tool on the build machines, so this module is one: it
//! reads every `.rs` file under `src/` and finds each file's references to
//! other modules of the crate: `use crate::...` (grouped trees too),
//! `use super::...` and `self::...` resolved from the file's module path
//! (and the inline module they are written in), inline paths such as
//! `crate::x::y()`, and paths that start with a name a `use` of the crate
//! bound (`use crate::proto; proto::agent::X`). Comments, doc comments and
//! literals are skipped, and so is every `#[cfg(test)]` item (tests may
//! reach anywhere), as are the files of `#[cfg(test)] mod x;`. A module's
//! bare paths to its own children (`mod x; pub use x::Y;`) are not edges:
//! a module owns its children. `source.rs` reads a file.

mod source;
