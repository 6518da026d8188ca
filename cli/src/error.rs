//! What a command's failure is: any error, its text what the person reads
//! (`error: …`), the exit code 1.

/// A command's result.
pub(crate) type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;
