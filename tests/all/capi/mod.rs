//! The C API (`--features capi`): the functions and the header
//! (`abi`), error details and the checks on handles and overlapping calls
//! (`checks`), and every C and C++ block of the docs (`docs`).

mod abi;
mod checks;
mod docs;
