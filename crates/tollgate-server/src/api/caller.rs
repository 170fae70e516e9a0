//! Who is calling: a token's role, and [`Caller`], the token a request
//! presented (set by the authenticate layer, read by handlers).

use axum::http::Method;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Everything.
    Admin,
    /// GET and HEAD only: look, never change.
    Read,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Read => "read",
        }
    }

    /// Whether this role may send `method`. Every GET/HEAD route only
    /// reads (docs/HTTP.md, "Roles"), and no POST, PUT or DELETE route
    /// does, so the method alone decides.
    pub(crate) fn allows(self, method: &Method) -> bool {
        self == Role::Admin || method == Method::GET || method == Method::HEAD
    }
}

/// Which of the server's tokens a request presented (its place in the
/// list, admin tokens first, then read tokens) and so its role, set by
/// authentication: the client a ticket is counted against. Absent when
/// the server has no tokens: then every caller is an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller(pub(crate) usize, pub(crate) Role);
