//! The server with real sockets and real clients.

use super::*;
