//! How an etcd call failed, told by its gRPC status (code and etcd's own message, never
//! the words of an error already formatted), and what that makes it: worth another try,
//! or an answer to report.

use tonic::Code;

use crate::error::Error;

/// A call that failed: the server's status, or no answer at all.
#[derive(Debug)]
pub struct Failure {
    /// What the server answered; `None` when it did not (no connection, a broken one, or
    /// no answer in time).
    pub status: Option<Box<tonic::Status>>,
    /// Why there was no answer, when there was none.
    silence: String,
    /// No answer because there was no connection (refused, broken, or its TLS handshake
    /// refused), not for want of an answer in time.
    pub unconnected: bool,
    /// The connection was refused at its handshake (a TLS alert: no client certificate, an
    /// unknown CA), which the next try would meet again; a refused or reset connection is not.
    pub handshake_refused: bool,
    /// The call was sent more than once: an earlier try may have been applied.
    pub retried: bool,
}

impl Failure {
    /// The call ended with `status`: the server's answer, unless tonic made it of an
    /// error of the connection (it keeps that error as its source).
    pub fn answered(status: tonic::Status) -> Failure {
        if let Some(cause) = std::error::Error::source(&status) {
            let io = crate::error::io_error(cause);
            return Failure {
                handshake_refused: io.is_some_and(|io| !crate::error::passing_io(io.kind())),
                ..Failure::unconnected(format!("{}: {cause}", status.message()))
            };
        }
        Failure {
            status: Some(Box::new(status)),
            silence: String::new(),
            unconnected: false,
            handshake_refused: false,
            retried: false,
        }
    }

    /// No answer came in time (`why`).
    pub fn silent(why: impl std::fmt::Display) -> Failure {
        Failure {
            status: None,
            silence: why.to_string(),
            unconnected: false,
            handshake_refused: false,
            retried: false,
        }
    }

    /// No connection could be made, or it broke (`why`).
    pub fn unconnected(why: impl std::fmt::Display) -> Failure {
        Failure {
            unconnected: true,
            ..Failure::silent(why)
        }
    }

    fn code(&self) -> Option<Code> {
        self.status.as_deref().map(tonic::Status::code)
    }

    fn message(&self) -> &str {
        self.status.as_deref().map_or("", tonic::Status::message)
    }

    /// Worth another try, through another member or after an election: no answer, or
    /// what etcd answers while a member has no leader, a leader changes, a proposal is
    /// dropped or times out, or requests pile up (`Unavailable`, `ResourceExhausted`, and
    /// the codes a broken connection shows as).
    pub fn retryable(&self) -> bool {
        match self.code() {
            None => true,
            Some(code) => matches!(
                code,
                Code::Unavailable
                    | Code::ResourceExhausted
                    | Code::DeadlineExceeded
                    | Code::Aborted
                    | Code::Cancelled
                    | Code::Unknown
            ),
        }
    }

    /// etcd's answer for a lease that does not exist (expired, revoked, never granted):
    /// `NotFound`, "etcdserver: requested lease not found".
    pub fn lease_not_found(&self) -> bool {
        self.code() == Some(Code::NotFound) && self.message().contains("lease not found")
    }

    /// etcd's answer to a grant of a lease id in use: `FailedPrecondition`,
    /// "etcdserver: lease already exists".
    pub fn lease_exists(&self) -> bool {
        self.code() == Some(Code::FailedPrecondition)
            && self.message().contains("lease already exists")
    }

    /// A token the server no longer takes (it drops them after a while): log in again.
    pub fn stale_token(&self) -> bool {
        self.code() == Some(Code::Unauthenticated)
    }

    /// What happened, for messages.
    pub fn text(&self) -> String {
        match self.status.as_deref() {
            None => self.silence.clone(),
            Some(s) if s.message().is_empty() => format!("{:?}", s.code()),
            Some(s) => s.message().to_string(),
        }
    }

    /// The error `prefix: text` of its kind: [`Error::Transient`] for a failure the next
    /// try may not meet, [`Error::Unavailable`] for an answer that will not change.
    pub fn into_error(self, prefix: &str) -> Error {
        let msg = format!("{prefix}: {}", self.text());
        match self.retryable() {
            true => Error::Transient(msg),
            false => Error::Unavailable(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Status;

    #[test]
    fn elections_and_silence_are_retried_refusals_are_not() {
        let leader_changed = Failure::answered(Status::unavailable("etcdserver: leader changed"));
        assert!(leader_changed.retryable());
        let no_leader = Failure::answered(Status::unavailable("etcdserver: no leader"));
        assert!(no_leader.retryable());
        assert!(Failure::silent("no answer within 5s").retryable());
        let denied = Failure::answered(Status::permission_denied("etcdserver: permission denied"));
        assert!(!denied.retryable());
        let e = denied.into_error("etcd://h:1: KV/Txn");
        assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
        let e = leader_changed.into_error("etcd://h:1: KV/Txn");
        assert!(e.is_retryable(), "{e:?}");
    }

    #[test]
    fn lease_answers_are_told_by_code_and_message() {
        let gone = Failure::answered(Status::not_found("etcdserver: requested lease not found"));
        assert!(gone.lease_not_found() && !gone.lease_exists());
        let taken = Failure::answered(Status::failed_precondition(
            "etcdserver: lease already exists",
        ));
        assert!(taken.lease_exists() && !taken.lease_not_found());
        // The words alone, under another code, are not etcd's answer.
        let text = Failure::answered(Status::unavailable("requested lease not found"));
        assert!(!text.lease_not_found());
    }
}
