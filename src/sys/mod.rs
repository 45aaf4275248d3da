//! Small safe wrappers over the system calls the agent needs besides
//! mounts (those live in [`crate::mount`]): control groups, inotify, poll, peer
//! credentials, signals, file locks, names resolved beneath a dir
//! (`openat2`), and the loop devices and sparse copies of the
//! hostpath plugin's block volumes.
//! Each libc call is one small function holding the only `unsafe` block
//! for it.

pub mod beneath;
pub mod cgroup;
pub mod flock;
pub mod inotify;
pub mod loop_dev;
pub mod peercred;
pub mod poll;
pub mod process;
pub mod sparse;
