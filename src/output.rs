//! Output (stub).
