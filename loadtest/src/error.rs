//! The one error type of a load operation, with the stable code it is counted under.

/// Why one operation against a target failed.
///
/// Every variant maps to a short, stable [`OpError::code`]: the report counts errors
/// by that code, so a run shows *what* failed (a 409 `lock_held` is not a timeout).
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The server answered with an error (Baton problem+json `code`, or a code
    /// derived from etcd's gRPC-gateway error).
    #[error("server error {status}: {code}: {detail}")]
    Server {
        /// HTTP status.
        status: u16,
        /// Stable error code.
        code: String,
        /// Human-readable detail from the server.
        detail: String,
    },
    /// The request did not get an answer in time.
    #[error("timeout: {0}")]
    Timeout(String),
    /// Connection refused, reset or any other transport failure.
    #[error("transport: {0}")]
    Transport(String),
    /// The server answered 2xx with a body this tool cannot use.
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

impl OpError {
    /// The code this error is counted under in reports.
    pub fn code(&self) -> String {
        match self {
            OpError::Server { code, .. } => code.clone(),
            OpError::Timeout(_) => "timeout".to_owned(),
            OpError::Transport(_) => "transport".to_owned(),
            OpError::Protocol(_) => "protocol".to_owned(),
        }
    }
}

impl From<reqwest::Error> for OpError {
    fn from(error: reqwest::Error) -> Self {
        if error.is_timeout() {
            OpError::Timeout(error.to_string())
        } else if error.is_decode() {
            OpError::Protocol(error.to_string())
        } else {
            OpError::Transport(error.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable() {
        let server = OpError::Server {
            status: 409,
            code: "lock_held".into(),
            detail: String::new(),
        };
        assert_eq!(server.code(), "lock_held");
        assert_eq!(OpError::Timeout("x".into()).code(), "timeout");
    }
}
