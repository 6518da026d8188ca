//! What a command's failure is: any error, its text what the person reads
//! (`error: …`), and its class the exit code (see [`exit_code`]).

use crate::client::ClientError;

/// A command's result.
pub(crate) type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The exit codes, as `mapi --help` prints them.
pub(crate) const EXIT_CODES: &str = "Exit codes:
  0    done (a watched run or job succeeded)
  1    failed: a watched run or job did not succeed, or another error
  2    usage: the command line, or what it asked the API, is not valid (400, 413, 422)
  3    not found: no such thing, or it is gone (404, 410)
  4    refused: not signed in, not allowed, or over a limit or budget (401, 402, 403, 429)
  5    conflict: it changed meanwhile or already exists (409, 412)
  6    unavailable: the platform could not be reached or could not answer (5xx)
  141  the reader of the output went away (`mapi … | head`)

Colour is used on a terminal unless NO_COLOR is set.";

/// The exit code of a failed command, by the class of its error: a
/// refusal of the API by its HTTP status, an unreachable platform as
/// unavailable, anything else 1.
pub(crate) fn exit_code(e: &(dyn std::error::Error + 'static)) -> u8 {
    match e.downcast_ref::<ClientError>() {
        Some(ClientError::Problem(p)) => of_status(p.status),
        Some(ClientError::Unexpected { status, .. }) => of_status(*status),
        Some(ClientError::Unreachable { .. }) => 6,
        None => 1,
    }
}

fn of_status(status: u16) -> u8 {
    match status {
        400 | 413 | 422 => 2,
        404 | 410 => 3,
        401 | 402 | 403 | 429 => 4,
        409 | 412 => 5,
        500..=599 => 6,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mapi_api::problem::Problem;

    fn problem(status: u16) -> Box<dyn std::error::Error> {
        let mut p = Problem::new(mapi_api::problem::ProblemCode::Internal, "x");
        p.status = status;
        Box::new(ClientError::Problem(Box::new(p)))
    }

    #[test]
    fn each_class_of_failure_has_its_exit_code() {
        let codes: Vec<u8> =
            [400, 404, 401, 403, 429, 409, 503, 418].iter().map(|s| exit_code(&*problem(*s))).collect();
        assert_eq!(codes, [2, 3, 4, 4, 4, 5, 6, 1]);
        let plain: Box<dyn std::error::Error> = "no platform".into();
        assert_eq!(exit_code(&*plain), 1);
    }
}
