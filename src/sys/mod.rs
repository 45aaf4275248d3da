//! Small safe wrappers over the system calls the agent needs besides
//! mounts (those live in [`crate::mount`]): inotify, peer credentials and
//! signals. Each libc call is one small function holding the only `unsafe`
//! block for it.

pub mod inotify;
pub mod peercred;
pub mod process;
