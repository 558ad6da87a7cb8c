//! Scratch lives until its scope ends: frames and kernel frames (`scopes`,
//! `api`), checkpoints (`checkpoints`) and `with_context` (`context`); a
//! failure a kernel records or returns comes out of its scope.

mod api;
mod scopes;

#[cfg(feature = "std")]
mod checkpoints;
#[cfg(feature = "std")]
mod context;
