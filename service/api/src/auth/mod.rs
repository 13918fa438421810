//! Authentication and authorization (`--auth-file`): bearer tokens, each mapping
//! to a principal with a role and the name prefixes it may use per kind.
//!
//! With no auth file every request is served as before (no principals). With one,
//! every API request needs `Authorization: Bearer <token>`; health, metrics and
//! the static pages follow the file's `endpoints` section. Tokens are stored as
//! SHA-256 digests and compared in constant time; they never reach logs or errors.

mod authenticator;
mod caller;
mod policy;

pub use authenticator::{AuthError, Authenticator, Refusal};
pub(crate) use caller::NO_TOKEN;
pub use caller::{require_admin_or_secret, Caller, Credential};
pub use policy::{
    hash_token, token_digest, AuthPolicy, EndpointAccess, Kind, Principal, QuotaOverrides, Role,
};
