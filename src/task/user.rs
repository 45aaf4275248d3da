//! The user a task runs as: its ids, resolved in the agent before the
//! start from the task's `user` (a name or a numeric uid), and given to
//! whatever the start makes on its behalf (the root's `/secrets`,
//! artifacts and payloads with `chown`).

use std::ffi::CString;
use std::io;

/// A user to run as, resolved before the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct User {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// Looks up a user by name (or numeric uid) in the user database.
pub fn lookup_user(name: &str) -> io::Result<User> {
    let c_name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    match crate::sys::user::passwd_ids(&c_name)? {
        Some((uid, gid)) => Ok(User { uid, gid }),
        None => match name.parse::<u32>() {
            Ok(uid) => Ok(User { uid, gid: uid }),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no user {name:?}"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_resolve_by_name_and_number() {
        assert_eq!(lookup_user("root").unwrap(), User { uid: 0, gid: 0 });
        assert_eq!(
            lookup_user("4242").unwrap(),
            User {
                uid: 4242,
                gid: 4242
            }
        );
        assert!(lookup_user("no-such-user-csi").is_err());
    }
}
