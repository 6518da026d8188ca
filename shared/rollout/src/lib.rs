//! The promotion gate of model endpoints (written in the next commit).
